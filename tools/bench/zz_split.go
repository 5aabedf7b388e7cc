package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

var zzClaim, zzWrite, zzSnap, zzOnce atomic.Int64

func init() {
	if os.Getenv("ZZ_SPLIT") == "" {
		return
	}
	ctx := context.Background()
	e, err := newEnv(ctx)
	if err != nil {
		panic(err)
	}
	n := 100_000
	if err := seedCycleDB(ctx, e, n); err != nil {
		panic(err)
	}
	r, err := cycleCeiling(ctx, e, cycleSize{n, n})
	fmt.Println("rate", r, err, "claim", time.Duration(zzClaim.Load()), "write", time.Duration(zzWrite.Load()), "snap", time.Duration(zzSnap.Load()))
	os.Exit(0)
}
