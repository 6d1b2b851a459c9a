// The Go peer of sluice-bench's targets part: one golang.org/x/time/rate
// limiter per key in a sync.Map, as a Go service would keep them, each
// Allow() reading time.Now() (as sluice_acquire reads its own clock).
// Same keys ("key-%011d" and a NUL: 16 bytes), same limit (10^6/s, burst
// 1000), keys created before timing, uniform draws over them.
// Usage: sluice-bench-go KEYS OPS; prints ns per decision and the count allowed.
package main

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sluice-bench-go KEYS OPS")
		os.Exit(2)
	}
	n, err1 := strconv.Atoi(os.Args[1])
	ops, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil || n < 1 || ops < 1 {
		fmt.Fprintln(os.Stderr, "sluice-bench-go: KEYS and OPS are positive numbers")
		os.Exit(2)
	}
	keys := make([]string, n)
	var m sync.Map
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%011d\x00", i)
		m.Store(keys[i], rate.NewLimiter(rate.Limit(1e6), 1000))
	}
	const stream = 1 << 20
	idx := make([]uint32, stream)
	r := rand.New(rand.NewSource(11))
	for i := range idx {
		idx[i] = uint32(r.Intn(n))
	}
	allowed := 0
	start := time.Now()
	for i := 0; i < ops; i++ {
		v, _ := m.Load(keys[idx[i&(stream-1)]])
		if v.(*rate.Limiter).Allow() {
			allowed++
		}
	}
	elapsed := time.Since(start)
	fmt.Printf("%.2f %d\n", float64(elapsed.Nanoseconds())/float64(ops), allowed)
}
