package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Status is the provider's health as recorded in provider_status.
type Status string

const (
	Healthy     Status = "HEALTHY"
	Degraded    Status = "DEGRADED"
	Maintenance Status = "MAINTENANCE"
	Recovering  Status = "RECOVERING"
)

// ParseStatus accepts a status name (case-insensitive).
func ParseStatus(s string) (Status, error) {
	st := Status(strings.ToUpper(strings.TrimSpace(s)))
	switch st {
	case Healthy, Degraded, Maintenance, Recovering:
		return st, nil
	}
	return "", fmt.Errorf("unknown provider status %q (allowed: HEALTHY, DEGRADED, MAINTENANCE, RECOVERING)", s)
}

// CanDispatch: only a HEALTHY or RECOVERING provider may be sent collection work.
func (s Status) CanDispatch() bool { return s == Healthy || s == Recovering }

// Querier is what the status functions need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// StatusRow is one provider_status row with its effective status worked out.
type StatusRow struct {
	Provider string
	Status   Status // automatic status
	Reason   string
	Since    time.Time

	OverrideStatus Status // "" when no override is active
	OverrideReason string
	OverrideSince  time.Time
	OverrideUntil  *time.Time // nil = until cleared
}

// Effective is what collectors obey: an active manual override wins over the automatic status.
func (r StatusRow) Effective() (st Status, reason string, since time.Time) {
	if r.OverrideStatus != "" {
		return r.OverrideStatus, "manual override: " + r.OverrideReason, r.OverrideSince
	}
	return r.Status, r.Reason, r.Since
}

// ReadStatus reads a provider's row. An expired override is ignored (and reported as none);
// a missing row reads as HEALTHY so a fresh database can collect.
func ReadStatus(ctx context.Context, q Querier, providerName string) (StatusRow, error) {
	r := StatusRow{Provider: providerName}
	var ovStatus, ovReason *string
	var ovSince, ovUntil *time.Time
	err := q.QueryRow(ctx, `
		SELECT status, reason, since,
		       CASE WHEN override_status IS NOT NULL AND (override_until IS NULL OR override_until > now())
		            THEN override_status END,
		       override_reason, override_since, override_until
		FROM provider_status WHERE provider = $1`, providerName).
		Scan(&r.Status, &r.Reason, &r.Since, &ovStatus, &ovReason, &ovSince, &ovUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		r.Status, r.Reason = Healthy, "no status recorded"
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read provider_status for %s: %w", providerName, err)
	}
	if ovStatus != nil {
		r.OverrideStatus = Status(*ovStatus)
		if ovReason != nil {
			r.OverrideReason = *ovReason
		}
		if ovSince != nil {
			r.OverrideSince = *ovSince
		}
		r.OverrideUntil = ovUntil
	}
	return r, nil
}

// SetStatus records an automatic status. `since` moves only when the status actually changes,
// so repeated reports of the same condition keep the time it began. It reports whether the
// status changed.
func SetStatus(ctx context.Context, q Querier, providerName string, st Status, reason string) (changed bool, err error) {
	var prev *string
	err = q.QueryRow(ctx, `
		WITH prev AS (SELECT status FROM provider_status WHERE provider = $1)
		INSERT INTO provider_status AS p (provider, status, reason, since, updated_at)
		VALUES ($1, $2, $3, now(), now())
		ON CONFLICT (provider) DO UPDATE SET
			status = EXCLUDED.status,
			reason = EXCLUDED.reason,
			since = CASE WHEN p.status = EXCLUDED.status THEN p.since ELSE now() END,
			updated_at = now()
		RETURNING (SELECT status FROM prev)`, providerName, string(st), Clean(reason, MaxErrorRunes)).Scan(&prev)
	if err != nil {
		return false, fmt.Errorf("set provider %s status %s: %w", providerName, st, err)
	}
	return prev == nil || Status(*prev) != st, nil
}

// MoveStatus moves the automatic status from row's to `to` only if nobody moved it since row
// was read (the same status and since): several health monitors may step at once, and the
// first wins. It reports whether it moved it.
func MoveStatus(ctx context.Context, q Querier, row StatusRow, to Status, reason string) (moved bool, err error) {
	tag, err := q.Exec(ctx, `
		UPDATE provider_status SET status = $3, reason = $4, since = now(), updated_at = now()
		WHERE provider = $1 AND status = $2 AND since = $5`,
		row.Provider, string(row.Status), string(to), Clean(reason, MaxErrorRunes), row.Since)
	if err != nil {
		return false, fmt.Errorf("provider %s status %s → %s: %w", row.Provider, row.Status, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetOverride pins the effective status for `ttl` by the database clock (0 = until cleared).
func SetOverride(ctx context.Context, q Querier, providerName string, st Status, reason string, ttl time.Duration) error {
	_, err := q.Exec(ctx, `
		INSERT INTO provider_status AS p (provider, status, reason, override_status, override_reason, override_since, override_until)
		VALUES ($1, 'HEALTHY', 'initial', $2, $3, now(),
		        CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 millisecond' END)
		ON CONFLICT (provider) DO UPDATE SET
			override_status = EXCLUDED.override_status,
			override_reason = EXCLUDED.override_reason,
			override_since = now(),
			override_until = EXCLUDED.override_until,
			updated_at = now()`, providerName, string(st), Clean(reason, MaxErrorRunes), ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("set provider %s override: %w", providerName, err)
	}
	return nil
}

// ClearOverride removes a manual override; the automatic status applies again.
func ClearOverride(ctx context.Context, q Querier, providerName string) error {
	_, err := q.Exec(ctx, `
		UPDATE provider_status SET override_status = NULL, override_reason = NULL,
			override_since = NULL, override_until = NULL, updated_at = now()
		WHERE provider = $1`, providerName)
	if err != nil {
		return fmt.Errorf("clear provider %s override: %w", providerName, err)
	}
	return nil
}

// Transition is one change of the provider's automatic status or of its manual override.
type Transition struct {
	At     time.Time
	Kind   string // automatic, override, override cleared
	Status Status // "" when an override was cleared
	Reason string
}

// ReadTransitions returns a provider's newest transitions, newest first (provider_status_log,
// which a trigger on provider_status writes).
func ReadTransitions(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, providerName string, limit int) ([]Transition, error) {
	rows, err := q.Query(ctx, `
		SELECT at, kind, coalesce(status, ''), reason FROM provider_status_log
		WHERE provider = $1 ORDER BY id DESC LIMIT $2`, providerName, limit)
	if err != nil {
		return nil, fmt.Errorf("read provider %s transitions: %w", providerName, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var t Transition
		var st string
		err := r.Scan(&t.At, &t.Kind, &st, &t.Reason)
		t.Status = Status(st)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read provider %s transitions: %w", providerName, err)
	}
	return out, nil
}
