// Command go-redis-fenced is a fenced lease on Redis, written in Go, that
// leasecheck tests as a language-neutral target (--target exec:COMMAND).
//
// It speaks JSON Lines on stdin/stdout: a hello line, then one answer per
// request, one request at a time. Its semantics are those of leasecheck's
// reference targets/redis_lease.py: every operation is one Lua script (see
// scripts.go), epochs come from INCR of a per-node counter, expiry is judged
// by the server's clock (TIME), and the protected resource has a per-node
// fence that claims and accepted effects raise, read back with its effect log
// by one script (read_resource).
//
// Errors follow docs/contracts/exec-protocol.md: a store that cannot be reached before anything is
// sent answers "unavailable" (definitely not applied); a timeout or a lost
// connection after sending answers "indeterminate". Client retries are off:
// retrying an operation whose outcome is unknown could turn a granted claim
// into a reported "held".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	name = "go-redis-fenced"
	// prefix of every key, as in the Python reference: lc:{node}:state, ...
	prefix = "lc"
	// timeout of one dial, write or read; below leasecheck's default op deadline (5 s)
	timeout = 2 * time.Second
)

// request is one line leasecheck sends.
type request struct {
	ID      json.RawMessage `json:"id"`
	Op      string          `json:"op"`
	Node    string          `json:"node"`
	Nodes   []string        `json:"nodes"`
	Owner   string          `json:"owner"`
	TTLMs   *int64          `json:"ttl_ms"`
	Epoch   *int64          `json:"epoch"`
	Payload string          `json:"payload"`
	Result  string          `json:"result"`
}

// answer is one line the child prints; "id" is added when it is sent.
type answer map[string]any

func ok(fields answer) answer {
	fields["ok"] = true
	return fields
}

func refused(reason, message string) answer {
	a := answer{"ok": false, "reason": reason}
	if message != "" {
		a["message"] = message
	}
	return a
}

// unreachable marks an error of the dial: nothing was sent to Redis.
type unreachable struct{ err error }

func (u *unreachable) Error() string { return "redis unreachable: " + u.err.Error() }

// dialHook wraps dial errors in unreachable, so that they answer "unavailable".
type dialHook struct{}

func (dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, &unreachable{err}
		}
		return conn, nil
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failure is the answer to an error of the client: "unavailable" when Redis was
// not reached or refused before running anything (LOADING), else "indeterminate".
func failure(err error) answer {
	var u *unreachable
	kind := "indeterminate"
	if errors.As(err, &u) || redis.IsLoadingError(err) {
		kind = "unavailable"
	}
	return answer{"error": kind, "message": err.Error()}
}

type lease struct {
	rdb     *redis.Client
	scripts map[string]*redis.Script
	ttlMs   int64 // LEASECHECK_TTL_MS, for requests without ttl_ms; 0: none
}

func newLease(url string, ttlMs int64) (*lease, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
	opt.PoolSize = 1 // one request at a time
	opt.Protocol = 2 // no HELLO on connect
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	rdb := redis.NewClient(opt)
	rdb.AddHook(dialHook{})
	scripts := make(map[string]*redis.Script, len(scriptBodies))
	for op, body := range scriptBodies {
		scripts[op] = redis.NewScript(prelude + body)
	}
	return &lease{rdb: rdb, scripts: scripts, ttlMs: ttlMs}, nil
}

// keys are the node's keys, all with the hash tag {node}: one cluster slot.
func keys(node string) []string {
	k := make([]string, 0, 4)
	for _, part := range []string{"state", "epoch", "fence", "effects"} {
		k = append(k, fmt.Sprintf("%s:{%s}:%s", prefix, node, part))
	}
	return k
}

func (l *lease) run(ctx context.Context, op, node string, args ...any) ([]any, error) {
	return l.scripts[op].Run(ctx, l.rdb, keys(node), args...).Slice()
}

// outcome answers a script's reply {'ok', ...} or {reason[, message]}.
func outcome(reply []any, err error) answer {
	if err != nil {
		return failure(err)
	}
	if reply[0] == "ok" {
		return ok(answer{})
	}
	return refusal(reply)
}

func refusal(reply []any) answer {
	reason, _ := reply[0].(string)
	message := ""
	if len(reply) > 1 {
		message, _ = reply[1].(string)
	}
	return refused(reason, message)
}

func (l *lease) handle(ctx context.Context, r request) answer {
	ttl := l.ttlMs
	if r.TTLMs != nil {
		ttl = *r.TTLMs
	}
	switch r.Op {
	case "setup":
		for _, s := range l.scripts {
			if err := s.Load(ctx, l.rdb).Err(); err != nil {
				return failure(err)
			}
		}
		return ok(answer{})
	case "add_nodes":
		for i, node := range r.Nodes {
			if _, err := l.run(ctx, "add_node", node); err != nil {
				if i > 0 { // the first nodes are in: not "definitely not applied"
					return answer{"error": "indeterminate", "message": err.Error()}
				}
				return failure(err)
			}
		}
		return ok(answer{})
	case "read":
		reply, err := l.run(ctx, "read", r.Node)
		if err != nil {
			return failure(err)
		}
		return read(reply)
	case "read_resource":
		reply, err := l.run(ctx, "read_resource", r.Node)
		if err != nil {
			return failure(err)
		}
		return readResource(reply)
	case "claim":
		if ttl <= 0 {
			return refused("error", "no ttl_ms in the request and no LEASECHECK_TTL_MS")
		}
		reply, err := l.run(ctx, "claim", r.Node, r.Owner, ttl)
		if err != nil {
			return failure(err)
		}
		if reply[0] != "ok" {
			return refusal(reply)
		}
		return ok(answer{"epoch": reply[1], "token": nil})
	}
	if r.Epoch == nil {
		return refused("error", fmt.Sprintf("%s needs an epoch", r.Op))
	}
	switch r.Op {
	case "renew":
		if ttl <= 0 {
			return refused("error", "no ttl_ms in the request and no LEASECHECK_TTL_MS")
		}
		return outcome(l.run(ctx, "renew", r.Node, *r.Epoch, ttl))
	case "effect":
		return outcome(l.run(ctx, "effect", r.Node, *r.Epoch, r.Payload))
	case "commit":
		return outcome(l.run(ctx, "commit", r.Node, *r.Epoch, r.Result))
	case "release":
		return outcome(l.run(ctx, "release", r.Node, *r.Epoch))
	}
	return refused("error", fmt.Sprintf("unknown op %q", r.Op))
}

// read answers the node's record [status, epoch, owner, result]; no record is READY at epoch 0.
func read(reply []any) answer {
	status, found := reply[0].(string)
	if !found {
		return ok(answer{"status": "READY", "epoch": 0, "owner": nil, "result": nil})
	}
	epoch, err := strconv.ParseInt(fmt.Sprint(reply[1]), 10, 64)
	if err != nil {
		return answer{"error": "indeterminate", "message": fmt.Sprintf("bad epoch in the record: %v", reply[1])}
	}
	owner := reply[2]
	if status == "READY" {
		owner = nil
	}
	return ok(answer{"status": status, "epoch": epoch, "owner": owner, "result": reply[3]})
}

// entry is one effect the resource accepted, as the effect script logged it.
type entry struct {
	Epoch   int64  `json:"epoch"`
	Payload string `json:"payload"`
}

// readResource answers [fence, log]: the fence and every accepted effect, oldest first.
func readResource(reply []any) answer {
	fence, isInt := reply[0].(int64)
	log, isList := reply[1].([]any)
	if !isInt || !isList {
		return answer{"error": "indeterminate", "message": fmt.Sprintf("bad resource reply: %v", reply)}
	}
	accepted := make([]entry, 0, len(log))
	for _, raw := range log {
		var e entry
		if s, isString := raw.(string); !isString || json.Unmarshal([]byte(s), &e) != nil {
			return answer{"error": "indeterminate", "message": fmt.Sprintf("bad entry in the effect log: %v", raw)}
		}
		accepted = append(accepted, e)
	}
	return ok(answer{"fence": fence, "accepted": accepted})
}

func main() {
	url := os.Getenv("LEASECHECK_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, name+": LEASECHECK_URL is not set (redis://host:port/db)")
		os.Exit(2)
	}
	var ttlMs int64
	if s := os.Getenv("LEASECHECK_TTL_MS"); s != "" {
		var err error
		if ttlMs, err = strconv.ParseInt(s, 10, 64); err != nil {
			fmt.Fprintf(os.Stderr, "%s: LEASECHECK_TTL_MS=%q is not an integer\n", name, s)
			os.Exit(2)
		}
	}
	l, err := newLease(url, ttlMs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: LEASECHECK_URL: %v\n", name, err)
		os.Exit(2)
	}
	defer l.rdb.Close()

	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	send := func(a answer) {
		if err := enc.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "%s: cannot encode %v: %v\n", name, a, err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1) // leasecheck closed our stdout: nobody to answer
		}
	}
	send(answer{"leasecheck": 1, "name": name, "fenced": true, "resource": true})

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 16*1024*1024)
	ctx := context.Background()
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "%s: not a JSON request (%v): %s\n", name, err, in.Bytes())
			os.Exit(2)
		}
		if len(r.ID) == 0 {
			fmt.Fprintf(os.Stderr, "%s: a request without an id: %s\n", name, in.Bytes())
			os.Exit(2)
		}
		a := l.handle(ctx, r)
		a["id"] = r.ID
		send(a)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stdin: %v\n", name, err)
		os.Exit(1)
	}
}
