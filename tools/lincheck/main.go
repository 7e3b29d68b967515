// Command lincheck checks a history of key-value, counter and list operations, recorded by
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
//	{"client": 1, "kind": "incr", "key": "n1", "value": "3", "output": "7", "call": 124700000, "return": 124800000}
//	{"client": 2, "kind": "rpush", "key": "l1", "value": "c2-9", "output": "4", "call": 124900000, "return": 125000000}
//	{"client": 3, "kind": "lpop", "key": "l1", "output": "c2-1", "call": 125100000, "return": 125200000}
//	{"client": 3, "kind": "lrange", "key": "l1", "output": ["c2-4", "c2-9"], "call": 125300000, "return": 125400000}
//
// Fields:
//
//   - client: non-negative integer naming the client; it is the row of the
//     operation in the visualisation, so small dense numbers work best.
//   - kind: "put", "get", "delete" (a register); "incr" (INCRBY: adds the
//     integer value to the key's integer contents, absent counting as 0);
//     "rpush", "lpop", "lrange" (a list: append one value at the tail, take
//     the head, read it whole; an empty list is an absent key).
//   - key: string.
//   - value: the string written (put, rpush), the integer added (incr).
//   - output: required when the operation returned: the string read, or null
//     when the key was absent (get, lpop); the new contents as a decimal
//     string (incr); the list's new length as a decimal string (rpush); the
//     array of the list's values, head first (lrange).
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
// value, delete sets it to absent, and get must return its current contents;
// incr treats those contents as an integer, and the list operations treat them
// as a list (kept as its values joined by NUL bytes). A push lost or applied
// twice shows as a length, a pop or a read that no order of the operations
// explains.
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
	"strconv"
	"strings"
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
	opIncr   opKind = "incr"
	opPush   opKind = "rpush"
	opPop    opKind = "lpop"
	opRange  opKind = "lrange"
)

// listSep joins a list's values into a register's contents.
const listSep = "\x00"

// kvInput is the Input of a porcupine.Operation: what the client asked for.
type kvInput struct {
	Kind  opKind
	Key   string
	Value string // put and rpush: the value; incr: the integer added
}

// kvOutput is the Output of a porcupine.Operation: what the client got back.
type kvOutput struct {
	Present bool   // the key held a value (get, lpop) or a non-empty list (lrange)
	Value   string // what was read or returned, a list joined by listSep
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
	Step: step,
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
		case opIncr:
			s = fmt.Sprintf("incrby(%q, %s) -> %s", in.Key, in.Value, out.Value)
		case opPush:
			s = fmt.Sprintf("rpush(%q, %q) -> %s", in.Key, in.Value, out.Value)
		case opPop:
			s = fmt.Sprintf("lpop(%q) -> %s", in.Key, describeValue(out.Present, out.Value))
		case opRange:
			s = fmt.Sprintf("lrange(%q) -> [%s]", in.Key, strings.ReplaceAll(out.Value, listSep, " "))
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

// step applies one operation to a key's state: whether its output is the one
// the state gives, and the state after it. An operation without a reply is
// applied with any output.
func step(state, input, output interface{}) (bool, interface{}) {
	reg := state.(register)
	in := input.(kvInput)
	out := output.(kvOutput)
	switch in.Kind {
	case opPut:
		return true, register{Present: true, Value: in.Value}
	case opDelete:
		return true, register{}
	case opGet, opRange:
		return out.Present == reg.Present && (!out.Present || out.Value == reg.Value), reg
	case opIncr:
		return stepIncr(reg, in, out)
	case opPush:
		list := listOf(reg)
		list = append(list, in.Value)
		return out.NoReply || out.Value == strconv.Itoa(len(list)), registerOf(list)
	case opPop:
		list := listOf(reg)
		if len(list) == 0 {
			return out.NoReply || !out.Present, reg
		}
		return out.NoReply || (out.Present && out.Value == list[0]), registerOf(list[1:])
	default:
		panic(fmt.Sprintf("lincheck: unknown operation kind %q", in.Kind))
	}
}

// stepIncr is step for incr: contents that are not an integer refuse it.
func stepIncr(reg register, in kvInput, out kvOutput) (bool, interface{}) {
	cur := int64(0)
	if reg.Present {
		n, err := strconv.ParseInt(reg.Value, 10, 64)
		if err != nil {
			return false, reg
		}
		cur = n
	}
	delta, _ := strconv.ParseInt(in.Value, 10, 64) // checked when parsed
	next := strconv.FormatInt(cur+delta, 10)
	return out.NoReply || out.Value == next, register{Present: true, Value: next}
}

// listOf reads a register as a list.
func listOf(reg register) []string {
	if !reg.Present {
		return nil
	}
	return strings.Split(reg.Value, listSep)
}

// registerOf stores a list in a register (an empty list is an absent key).
func registerOf(list []string) register {
	if len(list) == 0 {
		return register{}
	}
	return register{Present: true, Value: strings.Join(list, listSep)}
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
	if (in.Kind == opGet || in.Kind == opRange) && rec.Return == nil {
		return op, false, nil // no effect, no output: nothing to check
	}
	out, err := parseKind(&in, &rec)
	if err != nil {
		return op, false, err
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

// parseKind checks the fields a kind needs, fills in the input's value and
// returns the output (zero when the operation did not return).
func parseKind(in *kvInput, rec *record) (kvOutput, error) {
	var out kvOutput
	needsValue := in.Kind == opPut || in.Kind == opPush || in.Kind == opIncr
	switch {
	case needsValue && rec.Value == nil:
		return out, fmt.Errorf(`%s needs a string "value"`, in.Kind)
	case needsValue:
		in.Value = *rec.Value
	}
	if _, err := strconv.ParseInt(in.Value, 10, 64); in.Kind == opIncr && err != nil {
		return out, errors.New(`incr "value" must be a decimal integer`)
	}
	switch in.Kind {
	case opPut, opDelete:
		return out, nil
	case opGet, opPop, opIncr, opPush, opRange:
	default:
		return out, fmt.Errorf(`unknown "kind" %q (want "put", "get", "delete", "incr", "rpush", "lpop" or "lrange")`, in.Kind)
	}
	if rec.Return == nil {
		return out, nil
	}
	if len(rec.Output) == 0 {
		return out, fmt.Errorf(`%s needs "output" when it returned`, in.Kind)
	}
	if in.Kind == opRange {
		var list []string
		if err := json.Unmarshal(rec.Output, &list); err != nil {
			return out, errors.New(`lrange "output" must be an array of strings`)
		}
		reg := registerOf(list)
		return kvOutput{Present: reg.Present, Value: reg.Value}, nil
	}
	var v *string
	if err := json.Unmarshal(rec.Output, &v); err != nil {
		return out, fmt.Errorf(`%s "output" must be a string or null`, in.Kind)
	}
	if v == nil && (in.Kind == opIncr || in.Kind == opPush) {
		return out, fmt.Errorf(`%s "output" must be a string`, in.Kind)
	}
	if v != nil {
		out = kvOutput{Present: true, Value: *v}
	}
	return out, nil
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

Checks a history of key-value, counter and list operations for
linearizability with Porcupine, modelling every key as an independent register
that starts absent (or a counter, or a list, by the operations used on it).

The history is JSON Lines, one operation per line:

  {"client": 3, "kind": "put", "key": "k1", "value": "v17", "call": 123456789, "return": 123999999}
  {"client": 1, "kind": "get", "key": "k1", "output": "v17", "call": 124000000, "return": 124100000}
  {"client": 1, "kind": "get", "key": "k2", "output": null, "call": 124200000, "return": 124300000}
  {"client": 2, "kind": "delete", "key": "k1", "call": 124400000, "return": null}
  {"client": 1, "kind": "incr", "key": "n1", "value": "3", "output": "7", "call": 1, "return": 2}
  {"client": 2, "kind": "rpush", "key": "l1", "value": "a", "output": "4", "call": 3, "return": 4}
  {"client": 3, "kind": "lpop", "key": "l1", "output": "x", "call": 5, "return": 6}
  {"client": 3, "kind": "lrange", "key": "l1", "output": ["y", "a"], "call": 7, "return": 8}

  client   non-negative integer (the row in the visualisation)
  kind     "put", "get" or "delete" (delete makes the key absent); "incr"
           (INCRBY); "rpush", "lpop", "lrange" (a list's tail push, head pop,
           whole read)
  key      string
  value    string written (put, rpush), integer added (incr)
  output   string read, or null if the key was absent (get, lpop); new
           integer (incr) or list length (rpush) as a string; the list's
           values (lrange)
  call     integer time in ns (monotonic, arbitrary origin)
  return   integer time in ns, or null if the operation never got an answer:
           an unanswered write may take effect at any time after its call,
           or never; an unanswered get or lrange is dropped.

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
