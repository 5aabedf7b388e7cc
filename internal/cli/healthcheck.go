package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is a probe for images without curl (distroless): it needs no database.
func newHealthcheckCmd(a *app) *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "Exit 0 when the daemon's /readyz (or --url) answers 2xx, 1 otherwise (for Docker HEALTHCHECK)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				if err := a.load(); err != nil {
					return err
				}
				u, err := readyzURL(a.cfg.Daemon.HTTPAddr)
				if err != nil {
					return err
				}
				url = u
			}
			return probeURL(cmd.Context(), url, timeout, a)
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "`URL` to probe (default: /readyz on daemon.http_addr, host 127.0.0.1)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}

// readyzURL turns daemon.http_addr (":9090", "0.0.0.0:9090") into a URL this host can reach.
func readyzURL(addr string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("daemon.http_addr is empty (no HTTP server): pass --url")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("daemon.http_addr %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

func probeURL(ctx context.Context, url string, timeout time.Duration, a *app) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError{cmd: "collector healthcheck", err: fmt.Errorf("--url %q: %w", url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("unhealthy: %s answered %s: %s", url, resp.Status, body)
	}
	a.printf("healthy: %s answered %s\n", url, resp.Status)
	return nil
}
