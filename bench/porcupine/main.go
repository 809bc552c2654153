// Command porcupine-lease checks a leasecheck history (format v1, JSON Lines)
// with Porcupine, the Go linearizability checker, under the lease model of
// docs/contracts/lease-model.md. It is the peer that bench/bench_porcupine.py measures
// leasecheck against, so it reads the very same file and prints one JSON line:
//
//	{"result": "ok|illegal|unknown", "seconds": 1.23, "parse_seconds": 0.9, "ops": 1000, "partitions": 40}
//
// "seconds" is Porcupine's check alone; "parse_seconds" is reading the file.
//
// -nondet models a crashed op's unknown effect as two next states (took effect,
// or not) with Porcupine's NondeterministicModel; without it, a plain Model
// applies a crashed op when it is legal (see model.go). The header's
// effect_fence picks the protected resource's rule, as in leasecheck.
//
// Usage: porcupine-lease [-nondet] [-timeout 120s] HISTORY.jsonl
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

func main() {
	timeout := flag.Duration("timeout", 0, "give up after this long and answer unknown (0: no limit)")
	nondet := flag.Bool("nondet", false, "model a crashed op as two next states (NondeterministicModel)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-nondet] [-timeout 120s] HISTORY.jsonl\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(3)
	}
	if err := run(flag.Arg(0), *timeout, *nondet); err != nil {
		fmt.Fprintf(os.Stderr, "porcupine-lease: %v\n", err)
		os.Exit(3)
	}
}

type report struct {
	Result       string  `json:"result"`
	Seconds      float64 `json:"seconds"`
	ParseSeconds float64 `json:"parse_seconds"`
	Ops          int     `json:"ops"`
	Partitions   int     `json:"partitions"`
}

func run(path string, timeout time.Duration, nondet bool) error {
	start := time.Now()
	ops, err := readHistory(path)
	if err != nil {
		return err
	}
	parsed := time.Now()
	model := leaseModel()
	if nondet {
		model = nondeterministicModel()
	}
	partitions := len(model.Partition(ops))
	checkStart := time.Now()
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	end := time.Now()
	out, _ := json.Marshal(report{
		Result:       resultName(res),
		Seconds:      round3(end.Sub(checkStart).Seconds()),
		ParseSeconds: round3(parsed.Sub(start).Seconds()),
		Ops:          len(ops),
		Partitions:   partitions,
	})
	fmt.Println(string(out))
	return nil
}

func resultName(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "illegal"
	default:
		return "unknown"
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// ---------------------------------------------------------------------------
// Reading format v1 into porcupine.Operation values.

// rawEvent is one line after the header; Process stays raw because it is an
// integer for a client and the string "nemesis" for faults.
type rawEvent struct {
	Index   int64           `json:"index"`
	Time    int64           `json:"time"`
	Process json.RawMessage `json:"process"`
	Type    string          `json:"type"`
	F       string          `json:"f"`
	Node    string          `json:"node"`
	Value   rawValue        `json:"value"`
}

// rawValue holds every field that any invoke or completion value may carry.
type rawValue struct {
	Owner    *string    `json:"owner"`
	Epoch    *int64     `json:"epoch"`
	Result   *string    `json:"result"`
	Status   string     `json:"status"`
	Payload  string     `json:"payload"`  // effect
	Fence    *int64     `json:"fence"`    // read-resource
	Accepted []rawEntry `json:"accepted"` // read-resource
}

// rawEntry is one accepted effect a read-resource lists.
type rawEntry struct {
	Epoch   *int64 `json:"epoch"`
	Payload string `json:"payload"`
}

type pendingCall struct {
	call  int64
	input input
}

// readHistory pairs invokes with completions. Failed ops are dropped (a fail
// did not happen, so it constrains nothing); an info completion, or none by
// the end of the file, is a crashed op: following Porcupine's documented
// answer to timeouts (issue #8), it "returns" at time infinity and its output
// is marked unknown, so the model applies its effect without checking a result.
func readHistory(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	head, err := readLine(r)
	if err != nil {
		return nil, fmt.Errorf("%s: missing header: %w", path, err)
	}
	leaseFence, err := effectFence(head)
	if err != nil {
		return nil, fmt.Errorf("%s:1: %w", path, err)
	}
	p := pairer{open: make(map[int64]pendingCall), leaseFence: leaseFence, readKeys: make(map[string]bool)}
	err = decodeEvents(r, func(lineno int, ev *rawEvent) error {
		if err := p.add(ev); err != nil {
			return fmt.Errorf("%s:%d: %w", path, lineno, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p.finish(), nil
}

// effectFence reads the header's effect_fence: true for "lease" (the default
// when absent: a claim lifts the protected resource's fence), false for
// "token" (only accepted effects do), an error for anything else, as
// leasecheck's reader says.
func effectFence(header []byte) (bool, error) {
	var h struct {
		EffectFence *string `json:"effect_fence"`
	}
	if err := json.Unmarshal(header, &h); err != nil {
		return false, fmt.Errorf("bad header: %w", err)
	}
	if h.EffectFence == nil {
		return true, nil
	}
	switch *h.EffectFence {
	case "lease":
		return true, nil
	case "token":
		return false, nil
	}
	return false, fmt.Errorf(`header "effect_fence" must be "lease" or "token", not %q`, *h.EffectFence)
}

// pairer turns the event stream into operations, in completion order.
type pairer struct {
	open       map[int64]pendingCall
	ops        []porcupine.Operation
	leaseFence bool // effect_fence "lease": effects act on their node's own object
	// the objects an ok read-resource reads: only their effects keep a log, and
	// only their crashed effects under "lease" are kept (crashedEffects until the end)
	readKeys       map[string]bool
	crashedEffects []porcupine.Operation
}

func (p *pairer) add(ev *rawEvent) error {
	if len(ev.Process) > 0 && ev.Process[0] == '"' {
		return nil // nemesis events say nothing about the store
	}
	proc, err := strconv.ParseInt(string(ev.Process), 10, 64)
	if err != nil {
		return fmt.Errorf("bad process %s", ev.Process)
	}
	if ev.Type == "invoke" {
		in, err := makeInput(ev, p.leaseFence)
		if err != nil {
			return err
		}
		p.open[proc] = pendingCall{ev.Time, in}
		return nil
	}
	call, ok := p.open[proc]
	if !ok {
		return errors.New("completion without invoke")
	}
	delete(p.open, proc)
	switch ev.Type {
	case "ok":
		out, err := makeOutput(call.input.kind, &ev.Value)
		if err != nil {
			return err
		}
		if call.input.kind == opReadResource {
			p.readKeys[call.input.key] = true
		}
		p.ops = append(p.ops, operation(proc, call, out, ev.Time))
	case "info":
		p.addCrashed(proc, call)
	}
	return nil
}

// addCrashed adds an op whose outcome is unknown. A crashed read, renew or
// read-resource is left out: none changes the modelled state, so with no output
// to check it constrains nothing, and leaving it out spares the search a pending
// op. So is a crashed effect on a node's object (effect_fence "lease") that no
// read-resource reads: taking effect would only raise the fence, which never
// lets anything else happen, and it would otherwise be a pending op on the
// node's own, busiest partition. Where a read-resource reads the object, the
// fence and the log it may have appended to are observed: finish keeps it.
func (p *pairer) addCrashed(proc int64, call pendingCall) {
	switch call.input.kind {
	case opRead, opRenew, opReadResource:
		return
	case opLeaseEffect:
		p.crashedEffects = append(p.crashedEffects, operation(proc, call, output{unknown: true}, math.MaxInt64))
		return
	}
	p.ops = append(p.ops, operation(proc, call, output{unknown: true}, math.MaxInt64))
}

// finish adds the ops that never completed: crashed, like info. They go in
// invoke order, so that every run hands Porcupine the same history. Then the
// objects some read-resource reads keep a log (see model.go).
func (p *pairer) finish() []porcupine.Operation {
	procs := make([]int64, 0, len(p.open))
	for proc := range p.open {
		procs = append(procs, proc)
	}
	sort.Slice(procs, func(i, j int) bool { return p.open[procs[i]].call < p.open[procs[j]].call })
	for _, proc := range procs {
		p.addCrashed(proc, p.open[proc])
	}
	if len(p.readKeys) == 0 {
		return p.ops
	}
	for _, op := range p.crashedEffects {
		if p.readKeys[op.Input.(input).key] {
			p.ops = append(p.ops, op)
		}
	}
	for i := range p.ops {
		in := p.ops[i].Input.(input)
		if (in.kind == opEffect || in.kind == opLeaseEffect) && p.readKeys[in.key] {
			in.logged = true
			p.ops[i].Input = in
		}
	}
	return p.ops
}

// batch is a run of consecutive lines, decoded by one goroutine.
type batch struct {
	first int // line number of lines[0]
	lines [][]byte
	evs   []rawEvent
	err   error
	done  chan struct{}
}

const batchLines = 4096

// decodeEvents decodes the lines on every core (encoding/json is the slow part
// of reading a million-op history) and hands the events to fn in file order.
func decodeEvents(r *bufio.Reader, fn func(lineno int, ev *rawEvent) error) error {
	jobs := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	ordered := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		go func() {
			for b := range jobs {
				b.decode()
			}
		}()
	}
	var readErr error
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(jobs)
		defer close(ordered)
		readErr = readBatches(r, func(b *batch) bool {
			select {
			case ordered <- b:
			case <-stop:
				return false
			}
			jobs <- b
			return true
		})
	}()
	for b := range ordered {
		<-b.done
		if b.err != nil {
			return b.err
		}
		for i := range b.evs {
			if err := fn(b.first+i, &b.evs[i]); err != nil {
				return err
			}
		}
	}
	return readErr // safe: ordered is closed only after readBatches returned
}

func readBatches(r *bufio.Reader, send func(*batch) bool) error {
	lineno := 2
	for {
		b := &batch{first: lineno, done: make(chan struct{})}
		for len(b.lines) < batchLines {
			line, err := readLine(r)
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return err
			}
			b.lines = append(b.lines, append([]byte(nil), line...))
		}
		if len(b.lines) == 0 || !send(b) {
			return nil
		}
		lineno += len(b.lines)
	}
}

func (b *batch) decode() {
	defer close(b.done)
	b.evs = make([]rawEvent, 0, len(b.lines))
	for i, line := range b.lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue // blank lines carry nothing (the numbering below skips them too)
		}
		var ev rawEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			b.err = fmt.Errorf("line %d: %w", b.first+i, err)
			return
		}
		b.evs = append(b.evs, ev)
	}
	b.lines = nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// a line longer than the buffer: gather it whole
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return nil, err
	}
	return line, nil
}

func operation(proc int64, call pendingCall, out output, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: int(proc), Input: call.input, Call: call.call, Output: out, Return: ret}
}

func makeInput(ev *rawEvent, leaseFence bool) (input, error) {
	kind, ok := kinds[ev.F]
	if !ok {
		return input{}, fmt.Errorf("unknown f %q", ev.F)
	}
	in := input{key: ev.Node, kind: kind}
	if kind == opEffect || kind == opReadResource {
		if leaseFence {
			if kind == opEffect {
				in.kind = opLeaseEffect // one object with its node's lease: a claim lifts the fence
			}
		} else {
			in.key = ev.Node + "\x00resource" // "token": the protected resource is its own object
			in.token = kind == opReadResource
		}
	}
	if ev.Value.Owner != nil {
		in.owner = *ev.Value.Owner
	}
	if ev.Value.Result != nil {
		in.result = *ev.Value.Result
	}
	if carriesEpoch(kind) {
		if ev.Value.Epoch == nil {
			return input{}, errors.New("unfenced histories (epoch null) are not supported")
		}
		in.epoch = *ev.Value.Epoch
	}
	if kind == opEffect {
		in.entry = logEntry(in.epoch, ev.Value.Payload)
	}
	return in, nil
}

func makeOutput(kind opKind, v *rawValue) (output, error) {
	out := output{}
	if kind == opReadResource {
		if v.Fence != nil {
			out.fence, out.hasFence = *v.Fence, true
		}
		out.log = emptyLog
		for _, e := range v.Accepted {
			if e.Epoch == nil {
				return output{}, errors.New("unfenced histories (epoch null) are not supported")
			}
			out.log = appendLog(out.log, logEntry(*e.Epoch, e.Payload))
		}
		return out, nil
	}
	if v.Epoch != nil {
		out.epoch = *v.Epoch
	}
	if kind == opRead {
		out.status = statuses[v.Status]
		if v.Owner != nil {
			out.owner = *v.Owner
		}
		if v.Result != nil {
			out.result = *v.Result
		}
	}
	return out, nil
}
