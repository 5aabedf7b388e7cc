// Package provider talks to the Neople Open API: one client per workload (market, item), each
// with its own API key, token-bucket limiter and per-minute budget; errors are classified from
// the Neople envelope so callers can tell maintenance from a bad item from a bad key. It also
// owns the provider_status row (the health gate every collector reads before dispatching).
package provider

import (
	"time"
)

// Workload names an API key and its budget. Keys are never shared between workloads.
type Workload string

const (
	// WorkloadMarket is /df/auction and /df/auction-sold (collection work).
	WorkloadMarket Workload = "market"
	// WorkloadItem is /df/items (catalog and import work).
	WorkloadItem Workload = "item"
)

// KeyEnv is the environment variable that holds a workload's API key. There is no fallback.
func (w Workload) KeyEnv() string {
	switch w {
	case WorkloadMarket:
		return "NEOPLE_MARKET_API_KEY"
	case WorkloadItem:
		return "NEOPLE_ITEM_API_KEY"
	}
	return ""
}

// Listing is one row of GET /df/auction.
type Listing struct {
	AuctionNo    int64
	RegDate      time.Time
	ExpireDate   time.Time
	ItemID       string
	ItemName     string
	Count        int64 // quantity remaining
	RegCount     int64 // quantity listed (regCount ?? count)
	UnitPrice    int64
	CurrentPrice int64
	AveragePrice int64
}

// Sale is one row of GET /df/auction-sold. The API gives no sale id.
type Sale struct {
	SoldAt    time.Time
	ItemID    string
	ItemName  string
	Count     int64
	Price     int64 // total
	UnitPrice int64
}

// Item is one row of GET /df/items.
type Item struct {
	ItemID             string
	ItemName           string
	ItemRarity         string
	ItemTypeID         string
	ItemType           string
	ItemTypeDetailID   string
	ItemTypeDetail     string
	ItemAvailableLevel int
	Fame               int
}

// KST is the zone of every date the API returns ("YYYY-MM-DD HH:MM:SS", no zone in the text).
var KST = time.FixedZone("KST", 9*60*60)
