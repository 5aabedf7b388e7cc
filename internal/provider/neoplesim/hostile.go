package neoplesim

import (
	"bytes"
	"compress/gzip"
	"strings"
)

// HostileText is provider text that must never poison a log, an error or a write.
type HostileText struct {
	Name string
	Text string
}

// HostileTexts are what a provider, a proxy in front of it or a maintenance page can send:
// NUL bytes, an EUC-KR page, gzip bytes served as plain text, and a 20,000-character Korean
// message.
func HostileTexts() []HostileText {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"error":{"status":503,"code":"DNF980","message":"SYSTEM_INSPECT"}}`))
	_ = zw.Close()
	return []HostileText{
		{"nul", "SYSTEM\x00INSPECT\x00"},
		// "점검 중입니다" (maintenance in progress) in EUC-KR.
		{"euc-kr", "\xc1\xa1\xb0\xcb \xc1\xdf\xc0\xd4\xb4\xcf\xb4\xd9"},
		{"gzip", gz.String()},
		{"long-korean", strings.Repeat("점검", 10000)},
	}
}
