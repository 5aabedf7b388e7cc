// Package telemetry builds the zap logger (and, for the daemon, the metrics registry).
package telemetry

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds a zap logger writing to w (stderr when nil). format is "json", "console" or
// "auto" (console when w is a terminal, json otherwise). Every line carries its caller, and
// durations are encoded in seconds (fields named *_seconds).
func NewLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log.level %q: %w", level, err)
	}
	if w == nil {
		w = os.Stderr
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.SecondsDurationEncoder
	var enc zapcore.Encoder
	switch ResolveFormat(format, w) {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		if !IsTerminal(w) {
			encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log.format %q: allowed json, console, auto", format)
	}
	// The daemon logs from many goroutines and w may be any writer (a buffer, a pipe), so
	// writes are serialised here rather than trusting w to be safe for concurrent use.
	ws := zapcore.Lock(zapcore.AddSync(w))
	core := zapcore.NewCore(enc, ws, lvl)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(ws)), nil
}

// ResolveFormat turns "auto" (or "") into console on a terminal and json elsewhere.
func ResolveFormat(format string, w io.Writer) string {
	if format != "auto" && format != "" {
		return format
	}
	if IsTerminal(w) {
		return "console"
	}
	return "json"
}

// Instance names this process the one way every log line, lease and heartbeat uses: host:pid
// and a random suffix drawn once. The suffix is there because containers that share the
// host's name (host networking) are all pid 1, and two processes named alike would share one
// budget row and each release the other's probe: 32 bits, so that of ten such replicas
// restarted daily two are named alike once in about ten thousand years, not once in four
// years as with 16.
var Instance = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s:%d-%x", host, os.Getpid(), b)
})

// IsTerminal tells whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
