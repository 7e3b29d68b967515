// Command lincheck checks a history of key-value operations, recorded by
// Halyard's test clients, for linearizability. It uses the Porcupine checker
// (github.com/anishathalye/porcupine).
//
// # History format
//
// The input is JSON Lines: one operation per line, blank lines ignored.
//
//	{"client": 3, "kind": "put", "key": "k1", "value": "v17", "call": 123456789, "return": 123999999}
//	{"client": 1, "kind": "get", "key": "k1", "output": "v17", "call": 124000000, "return": 124100000}
//	{"client": 1, "kind": "get", "key": "k2", "output": null, "call": 124200000, "return": 124300000}
//	{"client": 2, "kind": "put", "key": "k2", "value": "v3", "call": 124400000, "return": null}
//	{"client": 0, "kind": "delete", "key": "k1", "call": 124500000, "return": 124600000}
//
// Fields:
//
//   - client: non-negative integer naming the client; it is the row of the
//     operation in the visualisation, so small dense numbers work best.
//   - kind: "put", "get" or "delete".
//   - key: string.
//   - value: the string written (put only).
//   - output: the string read, or null when the key was absent (get only;
//     required when the get returned).
//   - call, return: integer timestamps in nanoseconds from an arbitrary
//     origin, taken from a monotonic clock shared by all clients; return is
//     at or after call. Intervals are closed, so operations that touch at an
//     instant are concurrent.
//
// A null return means the operation never got an answer (the client gave up,
// or the server died): it may or may not have taken effect. Following
// Porcupine's recommendation, such a put or delete gets a return time of
// infinity (math.MaxInt64), so the checker may place it anywhere after its
// call, or after every other operation, which is the same as never. An
// unanswered get has no effect and no output, so it is dropped.
//
// # Model
//
// Every key is an independent register that starts absent: put sets it to a
// value, delete sets it to absent, and get must return its current contents.
// Since operations on different keys never constrain one another, the model
// partitions the history by key and Porcupine checks each key on its own; the
// history is linearizable if and only if every key's is.
//
// # Exit status
//
// 0 when the history is linearizable, 1 when it is not, 2 on bad usage, bad
// input, a failure to write the visualisation, or when the check timed out
// (result unknown).
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
	"time"

	"github.com/anishathalye/porcupine"
)

// Exit statuses.
const (
	exitOK      = 0 // linearizable
	exitIllegal = 1 // not linearizable
	exitError   = 2 // bad usage or input, I/O failure, or timeout
)

// opKind is the kind of a key-value operation.
type opKind string

const (
	opPut    opKind = "put"
	opGet    opKind = "get"
	opDelete opKind = "delete"
)

// kvInput is the Input of a porcupine.Operation: what the client asked for.
type kvInput struct {
	Kind  opKind
	Key   string
	Value string // put only
}

// kvOutput is the Output of a porcupine.Operation: what the client got back.
type kvOutput struct {
	Present bool   // get only: the key held a value
	Value   string // get only: the value read, when Present
	// NoReply marks a put or delete that never got an answer. The model
	// ignores it; it is only shown in the visualisation.
	NoReply bool
}

// register is the state of one key's partition. It is comparable, so
// states can be compared with ==.
type register struct {
	Present bool
	Value   string
}

// opMetadata is attached to each operation and shown in the tooltips of
// the visualisation, to find the operation in the history file.
type opMetadata struct {
	Line   int
	Client int
}

// kvModel is the key-partitioned register model described in the package
// comment.
var kvModel = porcupine.Model{
	Partition:      partitionByKey,
	PartitionEvent: partitionEventsByKey,
	Init: func() interface{} {
		return register{}
	},
	Step: func(state, input, output interface{}) (bool, interface{}) {
		reg := state.(register)
		in := input.(kvInput)
		switch in.Kind {
		case opPut:
			return true, register{Present: true, Value: in.Value}
		case opDelete:
			return true, register{}
		case opGet:
			out := output.(kvOutput)
			return out.Present == reg.Present && (!out.Present || out.Value == reg.Value), reg
		default:
			panic(fmt.Sprintf("lincheck: unknown operation kind %q", in.Kind))
		}
	},
	Equal: func(a, b interface{}) bool {
		return a.(register) == b.(register)
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(kvInput)
		out := output.(kvOutput)
		var s string
		switch in.Kind {
		case opPut:
			s = fmt.Sprintf("put(%q, %q)", in.Key, in.Value)
		case opDelete:
			s = fmt.Sprintf("delete(%q)", in.Key)
		case opGet:
			s = fmt.Sprintf("get(%q) -> %s", in.Key, describeValue(out.Present, out.Value))
		default:
			s = fmt.Sprintf("%s(%q)", in.Kind, in.Key)
		}
		if out.NoReply {
			s += " (no reply)"
		}
		return s
	},
	DescribeState: func(state interface{}) string {
		reg := state.(register)
		return describeValue(reg.Present, reg.Value)
	},
	DescribeOperationMetadata: func(info interface{}) string {
		m, ok := info.(opMetadata)
		if !ok {
			return ""
		}
		return fmt.Sprintf("history line %d, client %d", m.Line, m.Client)
	},
}

// describeValue renders a register's contents: the quoted value, or absent.
func describeValue(present bool, value string) string {
	if !present {
		return "absent"
	}
	return fmt.Sprintf("%q", value)
}

// partitionByKey splits a history into one sub-history per key, in the order
// in which the keys first appear.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	index := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range history {
		key := op.Input.(kvInput).Key
		i, ok := index[key]
		if !ok {
			i = len(parts)
			index[key] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// partitionEventsByKey is partitionByKey for the event-based representation.
// A return event carries no key, so it goes to the partition of the call
// event with the same Id.
func partitionEventsByKey(history []porcupine.Event) [][]porcupine.Event {
	index := make(map[string]int) // key -> partition
	byID := make(map[int]int)     // event Id -> partition
	nparts := 0
	for _, ev := range history {
		if ev.Kind != porcupine.CallEvent {
			continue
		}
		key := ev.Value.(kvInput).Key
		i, ok := index[key]
		if !ok {
			i = nparts
			index[key] = i
			nparts++
		}
		byID[ev.Id] = i
	}
	parts := make([][]porcupine.Event, nparts)
	for _, ev := range history {
		i, ok := byID[ev.Id]
		if !ok {
			panic(fmt.Sprintf("lincheck: return event %d has no call event", ev.Id))
		}
		parts[i] = append(parts[i], ev)
	}
	return parts
}

// record is one line of the history file. Pointers and RawMessage tell a
// missing or null field from a zero value.
type record struct {
	Client *int            `json:"client"`
	Kind   *string         `json:"kind"`
	Key    *string         `json:"key"`
	Value  *string         `json:"value"`
	Output json.RawMessage `json:"output"`
	Call   *int64          `json:"call"`
	Return *int64          `json:"return"`
}

// maxLineBytes bounds the length of one history line.
const maxLineBytes = 16 << 20

// parseHistory reads a JSON Lines history (see the package comment) and
// returns the operations to check. Unanswered gets are dropped; unanswered
// puts and deletes get a return time of math.MaxInt64. Errors name the
// offending line.
func parseHistory(r io.Reader) ([]porcupine.Operation, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var ops []porcupine.Operation
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		op, keep, err := parseOperation(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if keep {
			op.Metadata = opMetadata{Line: line, Client: op.ClientId}
			ops = append(ops, op)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", line+1, maxLineBytes)
		}
		return nil, err
	}
	return ops, nil
}

// parseOperation decodes and validates one history line. keep is false for
// an operation that has no bearing on linearizability (an unanswered get).
func parseOperation(text []byte) (op porcupine.Operation, keep bool, err error) {
	var rec record
	if err := json.Unmarshal(text, &rec); err != nil {
		return op, false, fmt.Errorf("invalid JSON: %w", err)
	}
	switch {
	case rec.Client == nil:
		return op, false, errors.New(`missing "client"`)
	case *rec.Client < 0:
		return op, false, fmt.Errorf(`"client" must be non-negative, got %d`, *rec.Client)
	case rec.Kind == nil:
		return op, false, errors.New(`missing "kind"`)
	case rec.Key == nil:
		return op, false, errors.New(`missing "key" (a string)`)
	case rec.Call == nil:
		return op, false, errors.New(`missing "call" (an integer time)`)
	case rec.Return != nil && *rec.Return < *rec.Call:
		return op, false, fmt.Errorf(`"return" (%d) is before "call" (%d)`, *rec.Return, *rec.Call)
	}

	in := kvInput{Kind: opKind(*rec.Kind), Key: *rec.Key}
	var out kvOutput
	switch in.Kind {
	case opPut:
		if rec.Value == nil {
			return op, false, errors.New(`put needs a string "value"`)
		}
		in.Value = *rec.Value
	case opDelete:
	case opGet:
		if rec.Return == nil {
			return op, false, nil // no effect, no output: nothing to check
		}
		if len(rec.Output) == 0 {
			return op, false, errors.New(`get needs "output" (a string, or null for an absent key)`)
		}
		var v *string
		if err := json.Unmarshal(rec.Output, &v); err != nil {
			return op, false, errors.New(`get "output" must be a string or null`)
		}
		if v != nil {
			out = kvOutput{Present: true, Value: *v}
		}
	default:
		return op, false, fmt.Errorf(`unknown "kind" %q (want "put", "get" or "delete")`, *rec.Kind)
	}

	ret := int64(math.MaxInt64) // no answer: may take effect any time after the call
	if rec.Return != nil {
		ret = *rec.Return
	} else {
		out.NoReply = true
	}
	return porcupine.Operation{
		ClientId: *rec.Client,
		Input:    in,
		Call:     *rec.Call,
		Output:   out,
		Return:   ret,
	}, true, nil
}

// countKeys returns the number of distinct keys in ops.
func countKeys(ops []porcupine.Operation) int {
	keys := make(map[string]struct{})
	for _, op := range ops {
		keys[op.Input.(kvInput).Key] = struct{}{}
	}
	return len(keys)
}

const usageText = `Usage: lincheck --history FILE [--html OUT.html] [--timeout 60s]

Checks a history of key-value operations for linearizability with Porcupine,
modelling every key as an independent register that starts absent.

The history is JSON Lines, one operation per line:

  {"client": 3, "kind": "put", "key": "k1", "value": "v17", "call": 123456789, "return": 123999999}
  {"client": 1, "kind": "get", "key": "k1", "output": "v17", "call": 124000000, "return": 124100000}
  {"client": 1, "kind": "get", "key": "k2", "output": null, "call": 124200000, "return": 124300000}
  {"client": 2, "kind": "delete", "key": "k1", "call": 124400000, "return": null}

  client   non-negative integer (the row in the visualisation)
  kind     "put", "get" or "delete" (delete makes the key absent)
  key      string
  value    string written (put)
  output   string read, or null if the key was absent (get)
  call     integer time in ns (monotonic, arbitrary origin)
  return   integer time in ns, or null if the operation never got an answer:
           an unanswered put or delete may take effect at any time after its
           call, or never; an unanswered get is dropped.

Prints one line, "operations=N keys=K result=ok|illegal|unknown", where N
counts the operations checked (unanswered gets excluded).

Exit status: 0 linearizable, 1 not linearizable, 2 bad input or usage,
failure to write the visualisation, or unknown (the check timed out).

Options:
`

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	historyPath := fs.String("history", "", "history `FILE` to check (JSON Lines, see above)")
	htmlPath := fs.String("html", "", "when the result is not ok, write Porcupine's visualisation to `OUT.html`")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long and report unknown (0: no limit)")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usageText)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // errors are reported below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr, "lincheck: run with --help for usage")
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "lincheck: unexpected argument %q; run with --help for usage\n", fs.Arg(0))
		return exitError
	case *historyPath == "":
		fmt.Fprintln(stderr, "lincheck: --history FILE is required; run with --help for usage")
		return exitError
	case *timeout < 0:
		fmt.Fprintln(stderr, "lincheck: --timeout must not be negative")
		return exitError
	}

	f, err := os.Open(*historyPath)
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %v\n", err)
		return exitError
	}
	ops, err := parseHistory(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %s: %v\n", *historyPath, err)
		return exitError
	}

	result, info := porcupine.CheckOperationsVerbose(kvModel, ops, *timeout)
	var name string
	switch result {
	case porcupine.Ok:
		name = "ok"
	case porcupine.Illegal:
		name = "illegal"
	default:
		name = "unknown"
	}
	fmt.Fprintf(stdout, "operations=%d keys=%d result=%s\n", len(ops), countKeys(ops), name)
	if result == porcupine.Ok {
		return exitOK
	}

	status := exitIllegal
	if result != porcupine.Illegal {
		status = exitError
		fmt.Fprintf(stderr, "lincheck: the check timed out after %v; try a longer --timeout (0: no limit)\n", *timeout)
	}
	if *htmlPath != "" {
		if err := porcupine.VisualizePath(kvModel, info, *htmlPath); err != nil {
			fmt.Fprintf(stderr, "lincheck: writing the visualisation: %v\n", err)
			return exitError
		}
	}
	if result == porcupine.Illegal {
		if *htmlPath != "" {
			fmt.Fprintf(stderr, "lincheck: not linearizable; open %s in a browser to see, for each key, the longest linearizable prefix and where it fails\n", *htmlPath)
		} else {
			fmt.Fprintln(stderr, "lincheck: not linearizable; rerun with --html OUT.html and open it in a browser to see where")
		}
	}
	return status
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
