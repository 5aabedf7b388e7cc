package market

import (
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// The market is a pure function of (seed, item, time): listings are redrawn every minute
// around a slowly moving price, and sales fall into fixed per-item time slots, so repeated
// fetches of /df/auction-sold overlap and new sales appear as time passes.

type kind struct {
	typ, detail string
	stack       bool
}

var (
	material   = kind{"스태커블", "재료", true}
	consumable = kind{"스태커블", "소모품", true}
	shortSword = kind{"무기", "소검", false}
	dagger     = kind{"무기", "단검", false}
)

// baseNames come first in every catalog. The first two share a prefix, so a "front" search
// for "무색 큐브" is ambiguous while "match" on either name is exact.
var baseNames = []struct {
	name string
	kind kind
}{
	{"무색 큐브 조각", material},
	{"무색 큐브 조각 상자", consumable},
	{"강렬한 소멸의 결정", material},
	{"코스모 소울", material},
	{"골드 큐브 조각", material},
	{"시간의 결정", material},
	{"모순의 결정체", material},
	{"정제된 혼돈의 결정", material},
	{"황금 증폭서", consumable},
	{"심연의 편린", material},
	{"찬란한 금빛 소검", shortSword},
	{"흑요석 단검", dagger},
}

// Rarities are the API's rarity values, lowest first.
var Rarities = []string{"커먼", "언커먼", "레어", "유니크", "레전더리", "에픽", "신화", "태초"}

// Item is one catalog item, its market and, in the realistic market, its ground truth.
type Item struct {
	provider.Item
	h          uint64 // per-item hash seed
	stack      bool
	extras     rowExtras // the optional objects the real API sends for some kinds
	base       float64   // typical unit price
	listings   int       // typical number of open listings
	salePeriod int64     // seconds per sale slot
	avgZero    bool      // averagePrice reported as 0, as the API sometimes does

	real *realistic // set in the realistic market (realistic.go)
}

func buildCatalog(n int, seed int64) []*Item {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6e656f706c65))
	out := make([]*Item, n)
	for i := range out {
		b := baseNames[i%len(baseNames)]
		name := b.name
		if i >= len(baseNames) {
			name = fmt.Sprintf("%s 꾸러미 %d", b.name, i/len(baseNames))
		}
		e := &Item{
			Item: provider.Item{
				ItemID:     fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()),
				ItemName:   name,
				ItemRarity: Rarities[r.IntN(len(Rarities))],
				ItemType:   b.kind.typ, ItemTypeID: typeID(b.kind.typ),
				ItemTypeDetail: b.kind.detail, ItemTypeDetailID: typeID(b.kind.typ + "/" + b.kind.detail),
				ItemAvailableLevel: 1,
			},
			h:        r.Uint64(),
			stack:    b.kind.stack,
			listings: r.IntN(40),
			// Log-uniform from 10 s to a day: busy items fill the 100-sale window in
			// minutes, quiet ones have fewer than 100 sales in the month.
			salePeriod: int64(math.Exp(math.Log(10) + r.Float64()*math.Log(8640))),
			avgZero:    r.IntN(10) == 0,
		}
		if e.stack {
			e.base = math.Exp(r.Float64()*math.Log(1e5)) + 10
		} else {
			// Equipment can cost more than 2^31 gold.
			e.base = math.Exp(math.Log(1e5) + r.Float64()*math.Log(5e4))
			e.ItemAvailableLevel = 1 + r.IntN(115)
			e.Fame = r.IntN(900)
		}
		if i%25 == 3 {
			e.listings = 450 // more than the 400 cap; few, since big bodies slow every test
		}
		e.setExtras(i)
		out[i] = e
	}
	return out
}

// rowExtras are the optional row objects of some kinds: exchange on some stackables,
// upgrade/upgradeMax on cards, avatar/jobs/setItemName on avatars.
type rowExtras struct {
	Exchange    *exchange    `json:"exchange,omitempty"`
	Upgrade     *int         `json:"upgrade,omitempty"`
	UpgradeMax  *int         `json:"upgradeMax,omitempty"`
	Avatar      *avatarStats `json:"avatar,omitempty"`
	Jobs        []job        `json:"jobs,omitempty"`
	SetItemName *string      `json:"setItemName,omitempty"`
}

type exchange struct {
	Count    int    `json:"count"`
	BindName string `json:"bindName"`
}

type avatarStats struct {
	Emblems []string `json:"emblems"`
	Ability string   `json:"ability"`
}

type job struct {
	JobID   string `json:"jobId"`
	JobName string `json:"jobName"`
}

// setExtras turns some items beyond the base names into cards and avatars, and gives some
// stackables an exchange object. It draws nothing from the catalog's random stream, so ids
// stay what they were.
func (e *Item) setExtras(i int) {
	switch {
	case i >= len(baseNames) && i%25 == 13:
		e.stack = false
		e.ItemType, e.ItemTypeDetail = "카드", "카드"
		e.ItemTypeID, e.ItemTypeDetailID = typeID("카드"), typeID("카드/카드")
		up, upMax := int(e.h%3), 3
		e.extras = rowExtras{Upgrade: &up, UpgradeMax: &upMax}
	case i >= len(baseNames) && i%25 == 19:
		e.stack = false
		e.ItemType, e.ItemTypeDetail = "아바타", "상의 아바타"
		e.ItemTypeID, e.ItemTypeDetailID = typeID("아바타"), typeID("아바타/상의 아바타")
		set := "시뮬레이터 클론 아바타 세트"
		e.extras = rowExtras{Avatar: &avatarStats{Emblems: []string{}, Ability: "공격 속도 6% 증가"},
			Jobs: []job{{JobID: typeID("귀검사"), JobName: "귀검사(남)"}}, SetItemName: &set}
	case e.stack && e.h%4 == 0:
		e.extras = rowExtras{Exchange: &exchange{Count: int(1 + e.h>>8%5), BindName: "계정 귀속"}}
	}
}

// typeID is a stable 32-hex id for a type name, the same in every catalog as in the real API.
func typeID(name string) string {
	sum := md5.Sum([]byte(name))
	return hex.EncodeToString(sum[:])
}

func mix(xs ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, x := range xs {
		h ^= x
		h += 0x9e3779b97f4a7c15
		h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
		h = (h ^ (h >> 27)) * 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

// frac maps a hash to [0, 1).
func frac(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// priceAt is the item's unit price at unix second t: a slow wave plus per-minute jitter.
func (e *Item) priceAt(t int64) float64 {
	minute := t / 60
	period := float64(60 + e.h%240)
	wave := 0.15 * math.Sin(2*math.Pi*float64(minute)/period+float64(e.h%628)/100)
	jitter := (frac(mix(e.h, uint64(minute))) - 0.5) * 0.04
	return max(e.base*(1+wave+jitter), 1)
}

type ItemRow struct {
	ItemID             string `json:"itemId"`
	ItemName           string `json:"itemName"`
	ItemRarity         string `json:"itemRarity"`
	ItemTypeID         string `json:"itemTypeId"`
	ItemType           string `json:"itemType"`
	ItemTypeDetailID   string `json:"itemTypeDetailId"`
	ItemTypeDetail     string `json:"itemTypeDetail"`
	ItemAvailableLevel int    `json:"itemAvailableLevel"`
	Fame               int    `json:"fame"`
}

func (e *Item) Row() ItemRow { return ItemRow(e.Item) }

type ItemDetail struct {
	ItemRow
	ItemExplain       string   `json:"itemExplain"`
	ItemExplainDetail string   `json:"itemExplainDetail"`
	ItemFlavorText    string   `json:"itemFlavorText"`
	SetItemID         *string  `json:"setItemId"`
	SetItemName       *string  `json:"setItemName"`
	ItemStatus        []string `json:"itemStatus"`
}

func (e *Item) Detail() ItemDetail {
	return ItemDetail{ItemRow: e.Row(), ItemExplain: e.ItemName + " (시뮬레이터)",
		ItemFlavorText: "neoplesim", ItemStatus: []string{}}
}

type Listing struct {
	AuctionNo  int64  `json:"auctionNo"`
	RegDate    string `json:"regDate"`
	ExpireDate string `json:"expireDate"`
	ItemRow
	Refine            int     `json:"refine"`
	Reinforce         int     `json:"reinforce"`
	AmplificationName *string `json:"amplificationName"`
	rowExtras
	Count        int64  `json:"count"`
	RegCount     *int64 `json:"regCount,omitempty"`
	Price        int64  `json:"price"`
	CurrentPrice int64  `json:"currentPrice"`
	UnitPrice    int64  `json:"unitPrice"`
	AveragePrice int64  `json:"averagePrice"`
}

// listingsAt is the order book at now, in auctionNo order (the API's default).
func (e *Item) Listings(now time.Time) []Listing {
	if e.real != nil {
		return e.realListings(now)
	}
	bucket := now.Unix() / 60
	return e.book(uint64(bucket), bucket*60, e.priceAt(now.Unix()))
}

// book draws an order book from key, with listings registered before start around price p0.
func (e *Item) book(key uint64, start int64, p0 float64) []Listing {
	bucket := key
	n := e.listings
	if n > 0 {
		n = max(n+int(mix(e.h, uint64(bucket))%5)-2, 0)
	}
	avg := int64(math.Round(e.base))
	if e.avgZero {
		avg = 0
	}
	out := make([]Listing, n)
	for j := range out {
		h := mix(e.h, uint64(bucket), uint64(j))
		unit := int64(max(p0*(1+0.002*float64(j))*(1+frac(h)/20), 1))
		count, reg := int64(1), (*int64)(nil)
		if e.stack {
			count = 1 + int64(h>>8%20000)
			// Most real rows were never partly bought: regCount equals count.
			rc := count
			if h>>50%7 == 0 {
				rc += 1 + int64(h>>24%1000)
			}
			reg = &rc
		}
		regDate := time.Unix(start-int64(h>>40%(20*3600)), 0)
		out[j] = Listing{
			AuctionNo: 1_000_000_000 + int64(h>>34), RegDate: kst(regDate), ExpireDate: kst(regDate.Add(24 * time.Hour)),
			ItemRow: e.Row(), rowExtras: e.extras, Count: count, RegCount: reg, Price: -1,
			UnitPrice: unit, CurrentPrice: unit * count, AveragePrice: avg,
		}
	}
	slices.SortFunc(out, func(a, b Listing) int { return cmp.Compare(a.AuctionNo, b.AuctionNo) })
	return out
}

type Sale struct {
	SoldDate string `json:"soldDate"`
	ItemRow
	Refine            int     `json:"refine"`
	Reinforce         int     `json:"reinforce"`
	AmplificationName *string `json:"amplificationName"`
	rowExtras
	Count     int64 `json:"count"`
	Price     int64 `json:"price"`
	UnitPrice int64 `json:"unitPrice"`
}

// salesAt returns up to limit sales before or at now, newest first, within the last 30 days.
// Each slot of salePeriod seconds holds zero, one, two different, or two identical sales, or
// a sweep: one buyer taking several listings in the same second at different prices, which
// the API lists highest unit price first.
func (e *Item) Sales(now time.Time, limit int) []Sale {
	if e.real != nil {
		return e.realSales(now, limit)
	}
	nowU := now.Unix()
	oldest := nowU - 30*24*3600
	p := e.salePeriod
	type timed struct {
		t   int64
		row Sale
	}
	var out []Sale
	for s := nowU / p; (s+1)*p > oldest && len(out) < limit; s-- {
		h := mix(e.h, 0x5a1e, uint64(s))
		sale := func(hh uint64) timed {
			t := s*p + int64(hh>>8%uint64(p))
			count := int64(1)
			if e.stack {
				count = 1 + int64(hh>>32%200)
			}
			unit := int64(max(e.priceAt(t)*(0.97+frac(hh)*0.06), 1))
			return timed{t, Sale{SoldDate: kst(time.Unix(t, 0)), ItemRow: e.Row(), rowExtras: e.extras, Count: count, Price: unit * count, UnitPrice: unit}}
		}
		var slot []timed
		switch h % 4 {
		case 1:
			slot = append(slot, sale(h))
		case 2:
			if h>>40%3 != 0 {
				slot = append(slot, sale(h), sale(mix(h, 2)))
				break
			}
			first := sale(h)
			for k := range 2 + int(h>>44%3) {
				x := sale(mix(h, 3, uint64(k)))
				x.t = first.t
				x.row.SoldDate = first.row.SoldDate
				slot = append(slot, x)
			}
		case 3:
			// Two real sales the API cannot tell apart.
			slot = append(slot, sale(h), sale(h))
		}
		slices.SortStableFunc(slot, func(a, b timed) int {
			return cmp.Or(cmp.Compare(b.t, a.t), cmp.Compare(b.row.UnitPrice, a.row.UnitPrice))
		})
		for _, x := range slot {
			if x.t <= nowU && x.t >= oldest {
				out = append(out, x.row)
			}
		}
	}
	return out[:min(len(out), limit)]
}

func kst(t time.Time) string { return t.In(provider.KST).Format(provider.DateLayout) }
