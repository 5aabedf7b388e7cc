package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// action runs one of the CLI's operator actions, for a logged-in session whose form carries its
// CSRF token. Each calls the function the CLI command calls.
func (c *Console) action(w http.ResponseWriter, r *http.Request) {
	if !c.actionsEnabled() {
		http.Error(w, "the console is read-only: no console password is configured", http.StatusForbidden)
		return
	}
	ss, sid, ok := c.sessionOf(r)
	if !ok {
		http.Error(w, "log in first", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) || !tokenMatch(r.PostFormValue("csrf"), ss.csrf) {
		http.Error(w, "bad or missing CSRF token", http.StatusForbidden)
		return
	}
	name := r.PathValue("action")
	done, err := c.run(r.Context(), name, ss.user, r)
	if err != nil {
		code := http.StatusInternalServerError
		var he httpError
		if errors.As(err, &he) {
			code = he.code
		} else if errors.Is(err, catalog.ErrNotTracked) {
			code = http.StatusNotFound
		} else if errors.Is(err, catalog.ErrNotPinnable) || errors.Is(err, catalog.ErrFixture) {
			code = http.StatusBadRequest
		}
		if code >= http.StatusInternalServerError {
			c.log.Warn("console: action failed", zap.String("action", name), zap.String("user", ss.user), zap.Error(err))
		}
		http.Error(w, err.Error(), code)
		return
	}
	c.auth.wroteAt(sid, time.Now())
	c.log.Info("console: action", zap.String("action", name), zap.String("user", ss.user), zap.String("done", done))
	// The overview shows the action's effect at once rather than at the next refresh.
	c.refresh(r.Context())
	http.Redirect(w, r, localPath(r.PostFormValue("back")), http.StatusSeeOther)
}

func (c *Console) run(ctx context.Context, name, user string, r *http.Request) (string, error) {
	why := "console, " + user
	switch name {
	case "pin":
		id := r.PostFormValue("item")
		if err := cleanValue(id); err != nil {
			return "", httpError{http.StatusBadRequest, "item: " + err.Error()}
		}
		t, err := tiers.Parse(r.PostFormValue("tier"))
		if err != nil {
			return "", httpError{http.StatusBadRequest, "tier: " + err.Error()}
		}
		ch, err := catalog.PinItem(ctx, c.pool, id, t)
		return fmt.Sprintf("item %s pinned %s → %s", id, ch.From, ch.To), err
	case "unpin":
		id := r.PostFormValue("item")
		if err := cleanValue(id); err != nil {
			return "", httpError{http.StatusBadRequest, "item: " + err.Error()}
		}
		return "item " + id + " unpinned", catalog.UnpinItem(ctx, c.pool, id)
	case "provider":
		switch r.PostFormValue("do") {
		case "pause":
			// What `collector provider set MAINTENANCE --reason …` does: held until resumed.
			return "provider paused", provider.SetOverride(ctx, c.pool, c.cfg.ProviderName, provider.Maintenance, "paused from the "+why, 0)
		case "resume":
			return "provider override cleared", provider.ClearOverride(ctx, c.pool, c.cfg.ProviderName)
		}
		return "", httpError{http.StatusBadRequest, "do: allowed pause, resume"}
	case "packing":
		on := r.PostFormValue("on") == "true"
		for _, ep := range []string{provider.EndpointAuction, provider.EndpointAuctionSold} {
			if err := dispatcher.SetPacking(ctx, c.pool, ep, on, "switched from the "+why); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("packing on: %t", on), nil
	case "outbox-retry":
		n, err := outbox.RetryFailed(ctx, c.pool, nil)
		return fmt.Sprintf("%d failed outbox events back in line", n), err
	}
	return "", httpError{http.StatusNotFound, "no action " + name}
}
