package main

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// The lease model of docs/contracts/lease-model.md, as a Porcupine model.
//
// Each node is one object with state (status, epoch, owner, result). Its
// protected resource is a fenced register that accepts an effect iff the
// effect's epoch is >= its fence, and the history header's effect_fence says
// what moves that fence, as for leasecheck's own checker:
//
//   - "token": only accepted effects. The resource is a second object, keyed
//     node+"\x00resource", whose state's epoch is the largest accepted epoch.
//   - "lease" (the default): granted claims too. The resource is part of the
//     node's object (opLeaseEffect), and the state carries the fence.
//
// Objects are independent, so the history is partitioned per object
// (P-compositionality) and each partition starts from the initial state:
// (READY, 0, none, none, no fence) for a node, 0 for a token resource.
//
// A crashed claim may take any epoch above the current one. Rather than branch
// on infinitely many epochs, the state keeps the least possible epoch and a
// "pinned" flag: an unpinned state stands for every epoch in [epoch, ceil], and
// the first op that names the epoch (a read, or an op carrying it) pins it.
// Only one such op can meet an unpinned state before it is pinned or replaced
// by a newer claim, so this is exact, not an approximation. Under "lease" the
// unknown epoch also lifted the fence: the fence field then leaves it out, an
// effect e is legal iff e >= fence and e >= the least possible epoch, and it
// bounds the unknown epoch from above (ceil = e: the claim's epoch was <= e),
// which a later pin must respect.
//
// The protected resource is observable (read-resource): its fence and its log of
// accepted (epoch, payload), oldest first. The state keeps the log as a 64-bit
// hash chain (logHash), so it stays a small comparable value: a read is legal iff
// the hash of the log it shows is the state's (exact but for a 64-bit hash
// collision). The fence is kept as its least possible value: a read may show any
// fence at or above it (a real resource may sit higher), and from then on the
// fence is what it showed (it never goes down). An ok effect appends to the log; a
// crashed one may have (two next states, as for any crashed op). Only the
// objects some read-resource reads keep a log (input.logged): elsewhere nothing
// observes it, and leaving it out keeps their states, and the search, as before.

type opKind uint8

const (
	opClaim opKind = iota
	opRenew
	opEffect
	opCommit
	opRelease
	opRead
	opLeaseEffect // an effect under effect_fence "lease": on the node's own object
	opReadResource
)

var kinds = map[string]opKind{
	"claim": opClaim, "renew": opRenew, "effect": opEffect,
	"commit": opCommit, "release": opRelease, "read": opRead,
	"read-resource": opReadResource,
}

var kindNames = [...]string{"claim", "renew", "effect", "commit", "release", "read", "effect", "read-resource"}

func carriesEpoch(k opKind) bool { return k != opClaim && k != opRead && k != opReadResource }

type nodeStatus uint8

const (
	statusUnknown nodeStatus = iota // a read status outside the format: never matches
	statusReady
	statusRunning
	statusSucceeded
)

var statuses = map[string]nodeStatus{"READY": statusReady, "RUNNING": statusRunning, "SUCCEEDED": statusSucceeded}

var statusNames = [...]string{"?", "READY", "RUNNING", "SUCCEEDED"}

// input is what an invoke asked; key names the object (node, or node's resource).
type input struct {
	key    string
	kind   opKind
	epoch  int64  // renew, effect, commit, release
	owner  string // claim
	result string // commit
	// effect: the hash of its log entry (logEntry), and whether the object keeps
	// a log (some read-resource reads it)
	entry  uint64
	logged bool
	token  bool // read-resource under effect_fence "token": the resource's own object
}

// output is what an ok completion said; unknown marks a crashed op.
type output struct {
	unknown bool
	epoch   int64 // claim, read
	status  nodeStatus
	owner   string
	result  string
	// read-resource: the fence it showed (hasFence false: null) and the hash of the log
	fence    int64
	hasFence bool
	log      uint64
}

// state of one object. A comparable struct, so Porcupine's default == works.
type state struct {
	status nodeStatus
	pinned bool  // false: the epoch is unknown, in [epoch, ceil] (after a crashed claim)
	epoch  int64 // node: current epoch; token resource: largest accepted epoch
	ceil   int64 // unpinned: the largest the unknown epoch can be (an effect bounded it)
	owner  string
	result string
	// effect_fence "lease": the largest epoch of the granted claims and accepted
	// effects (or the fence a read showed), leaving out an unpinned claim's unknown epoch (see above)
	fence int64
	// the resource's log of accepted effects, as a hash chain (emptyLog: none yet)
	logHash uint64
}

var initial = state{status: statusReady, pinned: true, ceil: math.MaxInt64, fence: math.MinInt64, logHash: emptyLog}

// emptyLog is the hash of an empty log; appendLog chains one entry onto a log's hash.
const emptyLog uint64 = 0x9e3779b97f4a7c15

func appendLog(h, entry uint64) uint64 { return mix64(h*0xbf58476d1ce4e5b9 ^ entry) }

// logEntry hashes one accepted (epoch, payload).
func logEntry(epoch int64, payload string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(payload); i++ {
		h = (h ^ uint64(payload[i])) * 1099511628211
	}
	return mix64(h ^ mix64(uint64(epoch)))
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func leaseModel() porcupine.Model {
	return porcupine.Model{
		Partition:         partitionByKey,
		Init:              func() interface{} { return initial },
		Step:              func(s, in, out interface{}) (bool, interface{}) { return step(s.(state), in.(input), out.(output)) },
		Hash:              func(s interface{}) uint64 { return hashState(s.(state)) },
		DescribeOperation: describeOperation,
		DescribeState:     func(s interface{}) string { return fmt.Sprintf("%+v", s.(state)) },
	}
}

// partitionByKey splits the history per object, keeping each one's order.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	index := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(input).key
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// step is the sequential specification. A crashed op (unknown output) is
// always legal: it either took effect (applied here when it is legal in s) or
// did not, and an op that did not can be linearized at the end, where it
// returns, so applying it there changes nothing anyone observed.
func step(s state, in input, out output) (bool, state) {
	switch in.kind {
	case opClaim:
		return claim(s, in, out)
	case opRead:
		if out.unknown {
			return true, s
		}
		return read(s, out)
	case opEffect:
		ok := in.epoch >= s.epoch
		if ok {
			s.epoch = in.epoch
			if in.logged {
				s.logHash = appendLog(s.logHash, in.entry)
			}
		}
		return ok || out.unknown, s
	case opLeaseEffect:
		return leaseEffect(s, in, out)
	case opReadResource:
		return readResource(s, in, out)
	default:
		return fenced(s, in, out)
	}
}

func claim(s state, in input, out output) (bool, state) {
	if s.status == statusSucceeded {
		return out.unknown, s // a crashed claim on a finished node failed
	}
	if out.unknown {
		// the new unknown epoch is above the old one, so the fence may leave the old one out too
		return true, state{status: statusRunning, pinned: false, epoch: s.epoch + 1, ceil: math.MaxInt64, owner: in.owner, fence: s.fence, logHash: s.logHash}
	}
	// an unpinned s.epoch is a lower bound of the real epoch e0: some e0 in
	// [s.epoch, out.epoch) exists iff out.epoch > s.epoch, as for a pinned one
	if out.epoch <= s.epoch {
		return false, s
	}
	return true, state{status: statusRunning, pinned: true, epoch: out.epoch, ceil: math.MaxInt64, owner: in.owner, fence: max(s.fence, out.epoch), logHash: s.logHash}
}

// leaseEffect is an effect under effect_fence "lease": accepted iff its epoch
// is >= the fence, which every granted claim lifted. An unpinned claim's
// unknown epoch e0 lifted it too: some e0 <= in.epoch must exist, and from
// then on e0 <= in.epoch (ceil). The lease itself is left as it was.
func leaseEffect(s state, in input, out output) (bool, state) {
	e := in.epoch
	if e < s.fence || (!s.pinned && e < s.epoch) {
		return out.unknown, s
	}
	s.fence = e
	if !s.pinned && e < s.ceil {
		s.ceil = e
	}
	if in.logged {
		s.logHash = appendLog(s.logHash, in.entry)
	}
	return true, s
}

// readResource: the log must be the state's; the fence, when shown, at least
// its least possible value, which it then becomes. Under "lease" (the node's own
// object) an unpinned claim's unknown epoch e0 is at most the fence shown (ceil),
// as for an effect; under "token" (the resource's object) the fence is epoch.
func readResource(s state, in input, out output) (bool, state) {
	if out.log != s.logHash {
		return false, s
	}
	if !out.hasFence {
		return true, s
	}
	f := out.fence
	if in.token {
		if f < s.epoch {
			return false, s
		}
		s.epoch = f
		return true, s
	}
	if f < s.fence || (!s.pinned && f < s.epoch) {
		return false, s
	}
	s.fence = f
	if !s.pinned && f < s.ceil {
		s.ceil = f
	}
	return true, s
}

// holds reports whether s can be the lease with epoch e, and pins it if so.
func holds(s state, e int64) (bool, state) {
	if s.status != statusRunning {
		return false, s
	}
	if s.pinned {
		return e == s.epoch, s
	}
	if e < s.epoch || e > s.ceil {
		return false, s
	}
	s.pinned, s.epoch, s.ceil = true, e, math.MaxInt64
	s.fence = max(s.fence, e) // the crashed claim's epoch, now known, lifted the fence
	return true, s
}

func fenced(s state, in input, out output) (bool, state) {
	if out.unknown && !s.pinned {
		return true, s // nobody returned that epoch yet: treat the crashed op as not applied
	}
	ok, next := holds(s, in.epoch)
	if !ok {
		return out.unknown, s
	}
	switch in.kind {
	case opCommit:
		next.status, next.result = statusSucceeded, in.result
	case opRelease:
		next.status, next.owner = statusReady, ""
	}
	return true, next
}

func read(s state, out output) (bool, state) {
	if out.status != s.status {
		return false, s
	}
	switch s.status {
	case statusReady:
		return out.epoch == s.epoch, s
	case statusRunning:
		if out.owner != s.owner {
			return false, s
		}
		return holds(s, out.epoch)
	default: // SUCCEEDED
		return out.epoch == s.epoch && out.owner == s.owner && out.result == s.result, s
	}
}

func hashState(s state) uint64 {
	h := uint64(14695981039346656037)
	mix := func(x uint64) { h = (h ^ x) * 1099511628211 }
	mix(uint64(s.status))
	if s.pinned {
		mix(1)
	}
	mix(uint64(s.epoch))
	mix(uint64(s.ceil))
	mix(uint64(s.fence))
	mix(s.logHash)
	for i := 0; i < len(s.owner); i++ {
		mix(uint64(s.owner[i]))
	}
	for i := 0; i < len(s.result); i++ {
		mix(uint64(s.result[i]))
	}
	return h
}

func describeOperation(in, out interface{}) string {
	i, o := in.(input), out.(output)
	res := "ok"
	if o.unknown {
		res = "unknown"
	} else if i.kind == opRead {
		res = fmt.Sprintf("%s e%d %s %s", statusNames[o.status], o.epoch, o.owner, o.result)
	} else if i.kind == opClaim {
		res = fmt.Sprintf("e%d", o.epoch)
	} else if i.kind == opReadResource {
		res = fmt.Sprintf("fence %d (%t) log %x", o.fence, o.hasFence, o.log)
	}
	return fmt.Sprintf("%s(e%d %s%s) -> %s", kindNames[i.kind], i.epoch, i.owner, i.result, res)
}

// nondeterministicModel is the same specification with a crashed op's two
// outcomes as two next states (took effect, or not), via Porcupine's
// NondeterministicModel power-set construction.
func nondeterministicModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []interface{} { return []interface{}{initial} },
		Step: func(s, in, out interface{}) []interface{} {
			return stepAll(s.(state), in.(input), out.(output))
		},
		Hash:              func(s interface{}) uint64 { return hashState(s.(state)) },
		DescribeOperation: describeOperation,
		DescribeState:     func(s interface{}) string { return fmt.Sprintf("%+v", s.(state)) },
	}
	return nm.ToModel()
}

func stepAll(s state, in input, out output) []interface{} {
	ok, next := step(s, in, out)
	switch {
	case !ok:
		return nil
	case out.unknown && next != s:
		return []interface{}{s, next}
	default:
		return []interface{}{next}
	}
}
