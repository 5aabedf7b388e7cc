package provider_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

// checkClean fails unless s is text any log or PostgreSQL accepts, within max runes (+ "…").
func checkClean(t *testing.T, what, s string, max int) {
	t.Helper()
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		t.Fatalf("%s is not clean UTF-8: %q", what, s)
	}
	if n := utf8.RuneCountInString(s); n > max+1 {
		t.Fatalf("%s has %d runes, cap %d", what, n, max)
	}
}

func TestCleanMakesHostileTextReadable(t *testing.T) {
	for _, h := range neoplesim.HostileTexts() {
		got := provider.Clean(h.Text, 100)
		checkClean(t, h.Name, got, 100)
		if got == "" {
			t.Fatalf("%s: cleaned to nothing; want readable replacement text", h.Name)
		}
		if again := provider.Clean(got, 100); again != got {
			t.Fatalf("%s: Clean is not idempotent: %q then %q", h.Name, got, again)
		}
	}
}

func TestCleanCapsByRunesNotBytes(t *testing.T) {
	s := strings.Repeat("점", 600) // 3 bytes each: a byte cut at 500 would split one
	got := provider.Clean(s, 500)
	if want := strings.Repeat("점", 500) + "…"; got != want {
		t.Fatalf("got %d runes, want 500 + …", utf8.RuneCountInString(got))
	}
	if got := provider.Clean("짧은 메시지", 500); got != "짧은 메시지" {
		t.Fatalf("short clean text changed: %q", got)
	}
}

func TestCleanReplacesEachRunOfBadBytesOnce(t *testing.T) {
	if got := provider.Clean("a\x00b\xff\xfe\x01c\td\ne", 0); got != "ab\uFFFDc\td\ne" {
		t.Fatalf("got %q", got)
	}
}
