package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// check parses a history given as text and runs the checker on it.
func check(t *testing.T, history string) porcupine.CheckResult {
	t.Helper()
	ops, err := parseHistory(strings.NewReader(history))
	if err != nil {
		t.Fatalf("parseHistory: %v", err)
	}
	result, _ := porcupine.CheckOperationsVerbose(kvModel, ops, 0)
	return result
}

// runCLI runs the command with args and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(args, &out, &errOut)
	return status, out.String(), errOut.String()
}

// writeHistory writes history text to a file in a test directory.
func writeHistory(t *testing.T, history string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// linearizable includes an unanswered put that a later get observes (k1 = v2)
// and one that no get ever observes (k2 = lost), plus an unanswered get.
const linearizable = `
{"client": 0, "kind": "put", "key": "k1", "value": "v1", "call": 100, "return": 200}
{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 150, "return": 250}
{"client": 2, "kind": "get", "key": "k2", "output": null, "call": 160, "return": 170}
{"client": 0, "kind": "put", "key": "k1", "value": "v2", "call": 300, "return": null}
{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 400, "return": 450}
{"client": 1, "kind": "get", "key": "k1", "output": "v2", "call": 500, "return": 550}
{"client": 1, "kind": "get", "key": "k1", "output": "v2", "call": 600, "return": 650}
{"client": 2, "kind": "put", "key": "k2", "value": "lost", "call": 300, "return": null}
{"client": 3, "kind": "get", "key": "k2", "output": null, "call": 700, "return": 750}
{"client": 3, "kind": "get", "key": "k2", "output": "nonsense", "call": 800, "return": null}
{"client": 3, "kind": "get", "key": "k2", "output": null, "call": 900, "return": 950}
`

// staleRead reads an older value after a newer put has completed.
const staleRead = `
{"client": 0, "kind": "put", "key": "k1", "value": "v1", "call": 0, "return": 10}
{"client": 0, "kind": "put", "key": "k1", "value": "v2", "call": 20, "return": 30}
{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 40, "return": 50}
`

func TestLinearizable(t *testing.T) {
	if got := check(t, linearizable); got != porcupine.Ok {
		t.Fatalf("result = %v, want Ok", got)
	}
}

func TestUnansweredOperations(t *testing.T) {
	ops, err := parseHistory(strings.NewReader(linearizable))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 10 {
		t.Errorf("got %d operations, want 10 (the unanswered get dropped)", len(ops))
	}
	for _, op := range ops {
		in := op.Input.(kvInput)
		if in.Kind == opPut && (in.Value == "v2" || in.Value == "lost") {
			if op.Return != math.MaxInt64 {
				t.Errorf("unanswered put %q: Return = %d, want math.MaxInt64", in.Value, op.Return)
			}
			if !op.Output.(kvOutput).NoReply {
				t.Errorf("unanswered put %q: NoReply not set", in.Value)
			}
		}
	}
}

func TestStaleReadIsIllegal(t *testing.T) {
	if got := check(t, staleRead); got != porcupine.Illegal {
		t.Fatalf("result = %v, want Illegal", got)
	}
}

func TestUnansweredPutCannotTakeEffectBeforeItsCall(t *testing.T) {
	const history = `
{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 0, "return": 10}
{"client": 0, "kind": "put", "key": "k1", "value": "v1", "call": 20, "return": null}
`
	if got := check(t, history); got != porcupine.Illegal {
		t.Fatalf("result = %v, want Illegal", got)
	}
}

func TestDelete(t *testing.T) {
	const base = `
{"client": 0, "kind": "put", "key": "k1", "value": "v1", "call": 0, "return": 10}
{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 20, "return": 30}
{"client": 0, "kind": "delete", "key": "k1", "call": 40, "return": 50}
`
	if got := check(t, base+`{"client": 1, "kind": "get", "key": "k1", "output": null, "call": 60, "return": 70}`); got != porcupine.Ok {
		t.Errorf("absent after delete: result = %v, want Ok", got)
	}
	if got := check(t, base+`{"client": 1, "kind": "get", "key": "k1", "output": "v1", "call": 60, "return": 70}`); got != porcupine.Illegal {
		t.Errorf("value still there after delete: result = %v, want Illegal", got)
	}
	// A get concurrent with the delete may see either.
	for _, output := range []string{`"v1"`, `null`} {
		h := base + `{"client": 1, "kind": "get", "key": "k1", "output": ` + output + `, "call": 45, "return": 70}`
		if got := check(t, h); got != porcupine.Ok {
			t.Errorf("get concurrent with delete -> %s: result = %v, want Ok", output, got)
		}
	}
}

func TestKeysAreIndependent(t *testing.T) {
	// The same values on two keys must not be confused with one another.
	const history = `
{"client": 0, "kind": "put", "key": "a", "value": "x", "call": 0, "return": 10}
{"client": 1, "kind": "get", "key": "b", "output": "x", "call": 20, "return": 30}
`
	if got := check(t, history); got != porcupine.Illegal {
		t.Fatalf("result = %v, want Illegal", got)
	}
}

func TestPartitionEvents(t *testing.T) {
	// The event-based API goes through PartitionEvent.
	events := []porcupine.Event{
		{ClientId: 0, Kind: porcupine.CallEvent, Value: kvInput{Kind: opPut, Key: "a", Value: "1"}, Id: 0},
		{ClientId: 1, Kind: porcupine.CallEvent, Value: kvInput{Kind: opGet, Key: "b"}, Id: 1},
		{ClientId: 0, Kind: porcupine.ReturnEvent, Value: kvOutput{}, Id: 0},
		{ClientId: 1, Kind: porcupine.ReturnEvent, Value: kvOutput{}, Id: 1},
		{ClientId: 1, Kind: porcupine.CallEvent, Value: kvInput{Kind: opGet, Key: "a"}, Id: 2},
		{ClientId: 1, Kind: porcupine.ReturnEvent, Value: kvOutput{Present: true, Value: "1"}, Id: 2},
	}
	if parts := partitionEventsByKey(events); len(parts) != 2 || len(parts[0]) != 4 || len(parts[1]) != 2 {
		t.Fatalf("partitions = %v, want 2 of sizes 4 and 2", parts)
	}
	if !porcupine.CheckEvents(kvModel, events) {
		t.Error("CheckEvents = false, want true")
	}
	events[5].Value = kvOutput{}
	if porcupine.CheckEvents(kvModel, events) {
		t.Error("CheckEvents on a stale read = true, want false")
	}
}

func TestMalformedInput(t *testing.T) {
	const good = `{"client": 0, "kind": "put", "key": "k", "value": "v", "call": 0, "return": 1}` + "\n"
	cases := []struct {
		name, line, want string
	}{
		{"not JSON", `{"client": 0, "kind": "put",`, "invalid JSON"},
		{"trailing data", `{"client": 0, "kind": "delete", "key": "k", "call": 0, "return": 1} {}`, "invalid JSON"},
		{"missing client", `{"kind": "delete", "key": "k", "call": 0, "return": 1}`, `missing "client"`},
		{"negative client", `{"client": -1, "kind": "delete", "key": "k", "call": 0, "return": 1}`, "non-negative"},
		{"missing kind", `{"client": 0, "key": "k", "call": 0, "return": 1}`, `missing "kind"`},
		{"unknown kind", `{"client": 0, "kind": "cas", "key": "k", "call": 0, "return": 1}`, `unknown "kind"`},
		{"missing key", `{"client": 0, "kind": "delete", "call": 0, "return": 1}`, `missing "key"`},
		{"numeric key", `{"client": 0, "kind": "delete", "key": 7, "call": 0, "return": 1}`, "invalid JSON"},
		{"put without value", `{"client": 0, "kind": "put", "key": "k", "call": 0, "return": 1}`, `"value"`},
		{"put with null value", `{"client": 0, "kind": "put", "key": "k", "value": null, "call": 0, "return": 1}`, `"value"`},
		{"get without output", `{"client": 0, "kind": "get", "key": "k", "call": 0, "return": 1}`, `"output"`},
		{"get with numeric output", `{"client": 0, "kind": "get", "key": "k", "output": 3, "call": 0, "return": 1}`, `"output"`},
		{"missing call", `{"client": 0, "kind": "delete", "key": "k", "return": 1}`, `missing "call"`},
		{"fractional time", `{"client": 0, "kind": "delete", "key": "k", "call": 0.5, "return": 1}`, "invalid JSON"},
		{"return before call", `{"client": 0, "kind": "delete", "key": "k", "call": 5, "return": 1}`, "before"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad line is line 3, after a good line and a blank one.
			_, err := parseHistory(strings.NewReader(good + "\n" + c.line + "\n" + good))
			if err == nil {
				t.Fatal("parseHistory succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), "line 3: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %q, want it to start with %q and mention %q", err, "line 3: ", c.want)
			}
		})
	}
}

func TestCLIOk(t *testing.T) {
	path := writeHistory(t, linearizable)
	html := filepath.Join(t.TempDir(), "out.html")
	status, stdout, stderr := runCLI(t, "--history", path, "--html", html)
	if status != exitOK {
		t.Errorf("status = %d, want %d; stderr: %s", status, exitOK, stderr)
	}
	if want := "operations=10 keys=2 result=ok\n"; stdout != want {
		t.Errorf("stdout = %q, want %q", stdout, want)
	}
	if _, err := os.Stat(html); !os.IsNotExist(err) {
		t.Errorf("visualisation written for an ok result (stat: %v)", err)
	}
}

func TestCLIIllegal(t *testing.T) {
	path := writeHistory(t, staleRead)
	html := filepath.Join(t.TempDir(), "out.html")
	status, stdout, stderr := runCLI(t, "--history="+path, "--html="+html, "--timeout=10s")
	if status != exitIllegal {
		t.Errorf("status = %d, want %d; stderr: %s", status, exitIllegal, stderr)
	}
	if want := "operations=3 keys=1 result=illegal\n"; stdout != want {
		t.Errorf("stdout = %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, html) {
		t.Errorf("stderr = %q, want a hint naming %s", stderr, html)
	}
	data, err := os.ReadFile(html)
	if err != nil {
		t.Fatalf("visualisation not written: %v", err)
	}
	if !bytes.Contains(data, []byte(`put(\"k1\", \"v2\")`)) {
		t.Errorf("visualisation does not describe the operations")
	}
}

func TestCLIMalformed(t *testing.T) {
	path := writeHistory(t, staleRead+"{oops}\n")
	status, stdout, stderr := runCLI(t, "--history", path)
	if status != exitError {
		t.Errorf("status = %d, want %d", status, exitError)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	// staleRead starts with a newline, so its three operations are lines 2-4.
	if !strings.Contains(stderr, "line 5:") {
		t.Errorf("stderr = %q, want it to name line 5", stderr)
	}
}

func TestCLIUsage(t *testing.T) {
	status, stdout, _ := runCLI(t, "--help")
	if status != exitOK || !strings.Contains(stdout, "JSON Lines") {
		t.Errorf("--help: status = %d, stdout = %q", status, stdout)
	}
	for _, args := range [][]string{
		{},
		{"--history"},
		{"--bogus"},
		{"--history", "x", "extra"},
		{"--history", "x", "--timeout", "-1s"},
		{"--history", filepath.Join(t.TempDir(), "missing.jsonl")},
	} {
		if status, _, stderr := runCLI(t, args...); status != exitError || stderr == "" {
			t.Errorf("%q: status = %d, stderr = %q; want %d and a message", args, status, stderr, exitError)
		}
	}
}

func TestEmptyHistory(t *testing.T) {
	status, stdout, _ := runCLI(t, "--history", writeHistory(t, "\n\n"))
	if status != exitOK || stdout != "operations=0 keys=0 result=ok\n" {
		t.Errorf("status = %d, stdout = %q", status, stdout)
	}
}

// counters and lists: an interleaving exists for each.
const countersAndLists = `
{"client": 0, "kind": "incr", "key": "n", "value": "2", "output": "2", "call": 0, "return": 10}
{"client": 1, "kind": "incr", "key": "n", "value": "5", "output": "7", "call": 5, "return": 20}
{"client": 2, "kind": "incr", "key": "n", "value": "1", "call": 6, "return": null}
{"client": 0, "kind": "get", "key": "n", "output": "8", "call": 30, "return": 40}
{"client": 0, "kind": "rpush", "key": "l", "value": "a", "output": "1", "call": 0, "return": 10}
{"client": 1, "kind": "rpush", "key": "l", "value": "b", "output": "2", "call": 5, "return": 15}
{"client": 2, "kind": "lpop", "key": "l", "call": 16, "return": null}
{"client": 0, "kind": "lrange", "key": "l", "output": ["b"], "call": 20, "return": 25}
{"client": 1, "kind": "lpop", "key": "l", "output": "b", "call": 30, "return": 35}
{"client": 1, "kind": "lpop", "key": "l", "output": null, "call": 40, "return": 45}
{"client": 1, "kind": "lrange", "key": "l", "output": [], "call": 50, "return": 55}
`

func TestCountersAndLists(t *testing.T) {
	if got := check(t, countersAndLists); got != porcupine.Ok {
		t.Fatalf("result = %v, want Ok", got)
	}
}

func TestListFaultsAreIllegal(t *testing.T) {
	cases := map[string]string{
		"a push applied twice": `
{"client": 0, "kind": "rpush", "key": "l", "value": "a", "output": "1", "call": 0, "return": 10}
{"client": 1, "kind": "lrange", "key": "l", "output": ["a", "a"], "call": 20, "return": 25}`,
		"an acknowledged push lost": `
{"client": 0, "kind": "rpush", "key": "l", "value": "a", "output": "1", "call": 0, "return": 10}
{"client": 0, "kind": "rpush", "key": "l", "value": "b", "output": "2", "call": 11, "return": 12}
{"client": 1, "kind": "lpop", "key": "l", "output": "b", "call": 20, "return": 25}`,
		"a value popped twice": `
{"client": 0, "kind": "rpush", "key": "l", "value": "a", "output": "1", "call": 0, "return": 10}
{"client": 1, "kind": "lpop", "key": "l", "output": "a", "call": 20, "return": 25}
{"client": 2, "kind": "lpop", "key": "l", "output": "a", "call": 30, "return": 35}`,
		"an increment counted twice": `
{"client": 0, "kind": "incr", "key": "n", "value": "3", "output": "3", "call": 0, "return": 10}
{"client": 1, "kind": "get", "key": "n", "output": "6", "call": 20, "return": 25}`,
	}
	for name, h := range cases {
		if got := check(t, h); got != porcupine.Illegal {
			t.Errorf("%s: result = %v, want Illegal", name, got)
		}
	}
}

func TestListAndCounterInputIsChecked(t *testing.T) {
	for _, h := range []string{
		`{"client": 0, "kind": "incr", "key": "n", "value": "x", "output": "1", "call": 0, "return": 1}`,
		`{"client": 0, "kind": "incr", "key": "n", "value": "1", "output": null, "call": 0, "return": 1}`,
		`{"client": 0, "kind": "rpush", "key": "l", "output": "1", "call": 0, "return": 1}`,
		`{"client": 0, "kind": "lrange", "key": "l", "output": "a", "call": 0, "return": 1}`,
		`{"client": 0, "kind": "lpop", "key": "l", "call": 0, "return": 1}`,
	} {
		if _, err := parseHistory(strings.NewReader(h)); err == nil {
			t.Errorf("accepted %s", h)
		}
	}
}
