package idemsim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// params is the shape of one run, drawn from its seed: how many engines,
// how the Engine is configured, how hostile the store and the clients are.
type params struct {
	engines        int
	lease          time.Duration
	renewEvery     time.Duration
	storeTimeout   time.Duration
	handlerTimeout time.Duration // 0: none
	ttl            time.Duration
	maxBody        int // Config.MaxResponseBody

	chaos      time.Duration // faults, crashes and misbehaving clients happen before this
	requests   int           // logical requests
	scopes     int
	keys       int // keys per scope
	burst      bool
	maxHandler time.Duration // the longest a handler works
	react      time.Duration // a handler stops within this of its context being cancelled
	skewMax    time.Duration // each engine's clock is off by at most this
	scopeSet   []int         // which of the scopes table the tenants are
	keyNames   []string

	crashes int
	pauses  int // process freezes

	// Per store call, outside the windows.
	pFail, pAmbiguous, pHang, pSlow float64
	slowMax                         time.Duration
	windows                         []window

	// Per attempt of a client.
	pShortTimeout, pCut, pOtherBody, pPanic float64
	pDeaf                                   float64 // a handler ignores its context
	pBadKey                                 float64 // a client first sends a malformed or missing key
	pEdge                                   float64 // a retry aims at the instant the record's lease runs out or it expires
	pAgain                                  float64 // an answered client sends its request once more
	pStream                                 float64 // a handler flushes its response; as often, it hijacks the connection
	pSingleRenew                            float64 // an engine renews lease by lease on a store that renews in batches

	// Jobs: messages a queue delivers at least once to consumers that run
	// them with Engine.Do in the engine processes.
	jobs    int
	jobKeys []string // one per job, as an event's id; some jobs take another's key, or a request's
	// Per delivery, during the chaos.
	pDuplicate float64 // the queue hands the message to a second consumer at once
	pOtherJob  float64 // another job under the message's key (a producer's mistake)
	pJobFail   float64 // the job fails, not permanently
	pPermanent float64 // the job fails permanently (at any time)
	pJobPanic  float64
	pDeadline  float64 // the consumer gives the job its own deadline: the visibility timeout
	pLostAck   float64 // a message done is delivered once more (its acknowledgement was lost)

	// Per batch renewal of two leases or more, during the chaos, on a
	// store that renews in batches: one node of the store fails.
	pPartial float64

	// crowd: jobs, more than one RenewBatch call renews (maxBatchRenewal
	// leases), that one engine runs at once on a healthy store, well after
	// the chaos, each for longer than a lease (0: none; see planCrowd).
	crowd int
	// forgets: how many times an operator forgets, with force, the key
	// of a run in flight (see operator).
	forgets int
}

// window is a spell of bad weather for the store, as every engine sees it
// (slot -1) or as one engine's network does.
type window struct {
	from, to time.Duration
	slot     int
	kind     windowKind
	lag      time.Duration // windowLag: every call takes up to this, each way
}

type windowKind uint8

const (
	windowSlow      windowKind = iota // some calls take longer than the lease
	windowDown                        // every call hangs until its deadline, or fails
	windowFlaky                       // half the calls fail, some after committing
	windowAmbiguous                   // half the calls commit, then fail or hang
	windowLag                         // every call is slow, each within its deadline
	windowKinds
)

var windowNames = [...]string{"slow", "down", "flaky", "ambiguous", "lag"}

func (w window) String() string {
	where := "store"
	if w.slot >= 0 {
		where = fmt.Sprintf("e%d's network", w.slot)
	}
	s := fmt.Sprintf("%s %s from %s to %s", where, windowNames[w.kind], w.from, w.to)
	if w.kind == windowLag {
		s += fmt.Sprintf(" (up to %s each way)", ms(w.lag))
	}
	return s
}

func msBetween(r *rand.Rand, lo, hi time.Duration) time.Duration {
	lo, hi = lo.Truncate(time.Millisecond), hi.Truncate(time.Millisecond)
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
}

// drawParams draws the world of a seed. Each step draws from the same
// generator in a fixed order, so a seed always draws the same world.
func drawParams(seed uint64) params {
	r := rand.New(rand.NewPCG(seed, 0xba5e))
	var p params
	p.drawEngine(r)
	p.drawLoad(r)
	p.drawHandlers(r)
	p.drawStore(r)
	p.drawClients(r)
	p.drawJobs(r)
	p.drawBatches(r)
	p.drawShortTTL(r)
	p.drawCrowd(r)
	p.drawOperator(r)
	return p
}

// drawEngine draws the engines and their configuration.
func (p *params) drawEngine(r *rand.Rand) {
	p.engines = 1 + r.IntN(4)
	p.lease = time.Duration(10+r.IntN(51)) * time.Second
	// A multiple of 4 ms, so that the renewer's tick (RenewEvery/4) and
	// every time derived from it stay in whole milliseconds, which stores
	// with millisecond precision keep exactly.
	p.renewEvery = msBetween(r, p.lease/5, p.lease/2).Truncate(4 * time.Millisecond)
	switch x := r.Float64(); {
	case x < 0.6:
		p.storeTimeout = msBetween(r, 500*time.Millisecond, p.lease/4)
	case x < 0.85:
		p.storeTimeout = msBetween(r, p.lease/4, p.lease/2)
	case x < 0.95:
		p.storeTimeout = msBetween(r, p.lease/2, p.lease)
	default:
		p.storeTimeout = msBetween(r, p.lease, 2*p.lease)
	}
	if r.Float64() < 0.3 {
		p.handlerTimeout = msBetween(r, p.lease/2, 3*p.lease)
	}
	p.ttl = 24 * time.Hour
	if r.Float64() < 0.4 {
		p.ttl = msBetween(r, 2*time.Minute, 10*time.Minute)
	}
	p.maxBody = 8<<10 + r.IntN(56<<10)
}

// drawLoad draws the chaos's length, the requests and their keys.
func (p *params) drawLoad(r *rand.Rand) {
	p.chaos = msBetween(r, time.Minute, 8*time.Minute)
	p.burst = r.Float64() < 0.5
	p.requests = 4 + r.IntN(37)
	if p.burst {
		p.requests = 4 + r.IntN(57)
	}
	p.scopes = 1 + r.IntN(3)
	p.scopeSet = r.Perm(len(scopes))[:p.scopes]
	p.keys = 1 + r.IntN(max(2, p.requests/p.scopes))
	for i := range p.keys {
		name := fmt.Sprintf("k%d", i)
		if r.Float64() < 0.2 {
			// Any printable ASCII, escapes and spaces included, up to the
			// longest key the Engine accepts.
			b := []byte(name + "-")
			for n := r.IntN(256 - len(b)); n > 0; n-- {
				b = append(b, byte(0x20+r.IntN(0x7f-0x20)))
			}
			name = string(b)
		}
		p.keyNames = append(p.keyNames, name)
	}
}

// tick is the Engine's renewer's tick: a pass every RenewEvery/4.
func (p *params) tick() time.Duration { return max(p.renewEvery/4, time.Millisecond) }

// drawHandlers draws how long handlers work, how fast they stop, and how
// far the engines' clocks are off.
func (p *params) drawHandlers(r *rand.Rand) {
	p.maxHandler = msBetween(r, p.lease/2, 3*p.lease)
	// Each engine's clock is off by up to skewMax, and a handler stops
	// within react of being told: the Engine tells it at least a tick
	// before the lease ends by its own clock, so react plus the largest
	// difference between two clocks stays within a tick.
	tick := p.renewEvery / 4
	if r.Float64() < 0.5 {
		p.skewMax = msBetween(r, 0, tick/4)
	}
	p.react = tick - 2*p.skewMax
	p.crashes = r.IntN(4)
	p.pauses = r.IntN(4)
}

// drawStore draws how hostile the store is, call by call and in spells.
func (p *params) drawStore(r *rand.Rand) {
	p.pFail = 0.1 * r.Float64()
	p.pAmbiguous = 0.1 * r.Float64()
	p.pHang = 0.05 * r.Float64()
	p.pSlow = 0.2 * r.Float64()
	p.slowMax = 2 * p.lease
	for range r.IntN(7) {
		w := window{slot: -1, kind: windowKind(r.IntN(int(windowKinds)))}
		if p.engines > 1 && r.Float64() < 0.6 {
			w.slot = r.IntN(p.engines)
		}
		w.from = msBetween(r, 0, p.chaos)
		w.to = min(p.chaos, w.from+msBetween(r, 5*time.Second, 3*p.lease))
		if w.kind == windowLag {
			w.lag = msBetween(r, p.renewEvery/10, p.renewEvery/2)
		}
		p.windows = append(p.windows, w)
	}
}

// drawJobs draws the jobs, their keys, and how the queue and the jobs
// misbehave. It draws last, so that the rest of a seed's world is as it
// was before jobs were simulated.
func (p *params) drawJobs(r *rand.Rand) {
	p.jobs = r.IntN(p.requests + 1)
	for i := range p.jobs {
		name := fmt.Sprintf("evt_%d", i)
		if r.Float64() < 0.15 {
			// Any bytes at all, NUL and invalid UTF-8 included, longer than
			// a request's key may be: Do takes the key as it is.
			b := []byte(name + "\x00")
			for n := r.IntN(400); n > 0; n-- {
				b = append(b, byte(r.IntN(256)))
			}
			name = string(b)
		}
		p.jobKeys = append(p.jobKeys, name)
	}
	p.pDuplicate = 0.3 * r.Float64()
	p.pOtherJob = 0.1 * r.Float64()
	p.pJobFail = 0.3 * r.Float64()
	p.pPermanent = 0.1 * r.Float64()
	p.pJobPanic = 0.05 * r.Float64()
	p.pDeadline = r.Float64()
	p.pLostAck = 0.5 * r.Float64()
}

// drawBatches draws how often a batch renewal fails in part. It draws
// after the jobs, so that the rest of a seed's world is as it was before.
func (p *params) drawBatches(r *rand.Rand) {
	p.pPartial = 0.3 * r.Float64()
}

// drawShortTTL sometimes makes the TTL shorter than a handler may work,
// so that records outlive their expiry in flight, their leases renewed,
// while the store's purger runs: a purger that went by the expiry alone
// would delete a record whose handler still runs. It draws last, so that
// the rest of a seed's world is as it was before.
func (p *params) drawShortTTL(r *rand.Rand) {
	if r.Float64() < 0.15 {
		p.ttl = msBetween(r, p.lease, p.maxHandler)
	}
}

// drawCrowd sometimes gives the world a crowd: a few hundred jobs at once
// on one engine, more than a RenewBatch call renews, once the store is
// healthy again (on a store that renews in batches: see newWorld). Only
// without a handler timeout, so that they work longer than a lease. It
// draws after the rest, so that the rest of a seed's world is as it was
// before; it always makes the same draws.
func (p *params) drawCrowd(r *rand.Rand) {
	x, n := r.Float64(), r.IntN(64)
	if x < 0.12 && p.handlerTimeout == 0 {
		p.crowd = 260 + n
	}
}

// drawOperator sometimes puts an operator in the world, who forgets the
// key of a run in flight with force, as idemctl forget -force does. It
// draws last, so that the rest of a seed's world is as it was before.
func (p *params) drawOperator(r *rand.Rand) {
	x, n := r.Float64(), r.IntN(4)
	if x < 0.3 {
		p.forgets = 1 + n
	}
}

// drawClients draws how clients and handlers misbehave.
func (p *params) drawClients(r *rand.Rand) {
	p.pShortTimeout = 0.5 * r.Float64()
	p.pCut = 0.2 * r.Float64()
	p.pOtherBody = 0.15 * r.Float64()
	p.pPanic = 0.03 * r.Float64()
	p.pDeaf = 0.05 * r.Float64()
	p.pBadKey = 0.05 * r.Float64()
	p.pEdge = 0.3 * r.Float64()
	p.pAgain = 0.5 * r.Float64()
	p.pStream = 0.05 * r.Float64()
	p.pSingleRenew = r.Float64()
}

func (p params) String() string {
	s := fmt.Sprintf("%d engines, lease %s, renew every %s, store timeout %s", p.engines, p.lease, p.renewEvery, p.storeTimeout)
	if p.handlerTimeout > 0 {
		s += fmt.Sprintf(", handler timeout %s", p.handlerTimeout)
	}
	if p.skewMax > 0 {
		s += fmt.Sprintf(", clocks off by up to %s", p.skewMax)
	}
	s += fmt.Sprintf(", TTL %s, max body %d; %d requests on %d scopes x %d keys", p.ttl, p.maxBody, p.requests, p.scopes, p.keys)
	if p.burst {
		s += " in a burst"
	}
	if p.jobs > 0 {
		s += fmt.Sprintf("; %d jobs", p.jobs)
	}
	if p.crowd > 0 {
		s += fmt.Sprintf("; a crowd of %d jobs", p.crowd)
	}
	s += fmt.Sprintf("; handlers up to %s; chaos for %s with %d crashes and %d freezes", p.maxHandler, p.chaos, p.crashes, p.pauses)
	if p.forgets > 0 {
		s += fmt.Sprintf("; an operator forgets %d keys in flight", p.forgets)
	}
	for _, w := range p.windows {
		s += "; " + w.String()
	}
	return s
}

// scopes are the tenants a run may use: the global one (""), a plain
// account, and two long scopes that share their first 300 bytes and hold
// bytes that are not UTF-8 (a NUL, 0xff), as a bearer token used as the
// tenant may: stores must keep them apart, whole.
var scopes = func() []string {
	long := strings.Repeat("eyJhbGciOiJIUzI1NiJ9.", 15)
	return []string{"", "acct_1", long + "\x00tenant-a\xff", long + "\x00tenant-b\xff"}
}()

// scopeLabel names a scope in traces.
func scopeLabel(scope string) string {
	for i, s := range scopes {
		if s == scope {
			return fmt.Sprintf("t%d", i)
		}
	}
	return fmt.Sprintf("%q", scope)
}
