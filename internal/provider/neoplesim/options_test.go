package neoplesim

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOptionsRefuseBadValuesNamingTheOption(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Items: -1}, "Items -1 (--items)"},
		{Options{Rate: -1}, "Rate -1 (--rate)"},
		{Options{Rate: math.NaN()}, "Rate NaN (--rate)"},
		{Options{Latency: -time.Second}, "Latency -1s (--latency)"},
		{Options{Market: "busy"}, `Market "busy" (--market): allowed default, realistic`},
		{Options{RateLimitStatus: 418}, "RateLimitStatus 418 (--rate-limit-status): allowed 400, 429"},
		{Options{ItemIDsLimit: "all"}, `ItemIDsLimit "all" (--itemids-limit)`},
		{Options{ItemIDsOrder: "sorted"}, `ItemIDsOrder "sorted" (--itemids-order)`},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate = %v, want it to name %q", tc.o, err, tc.want)
		}
	}
	var zero Options
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero options: %v", err)
	}
	d := zero.withDefaults()
	if d.Items != DefaultItems || d.ItemKey != DefaultItemKey || d.MarketKey != DefaultMarketKey ||
		d.RateLimitStatus != DefaultRateLimitStatus || d.ItemIDsLimit != DefaultItemIDsLimit ||
		d.ItemIDsOrder != DefaultItemIDsOrder || d.Market != "default" || d.Now == nil {
		t.Errorf("defaults %+v", d)
	}
}
