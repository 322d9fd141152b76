package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	t.Parallel()
	in := `{"Action":"start","Package":"m/a"}
{"Action":"output","Package":"m/a","Output":"TestOne\n"}
{"Action":"output","Package":"m/a","Output":"ExampleTwo\n"}
{"Action":"output","Package":"m/a","Output":"FuzzThree\n"}
{"Action":"output","Package":"m/a","Output":"BenchmarkFour\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.01s\n"}
not json
{"Action":"output","Package":"m/b","Output":"TestOne\n"}
`
	got, err := parseList(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := testList{"m/a": {"TestOne", "ExampleTwo", "FuzzThree"}, "m/b": {"TestOne"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseList = %v, want %v", got, want)
	}
}

func TestMatchBase(t *testing.T) {
	t.Parallel()
	base := testList{
		"m/a":   {"TestKept", "TestMovedToC", "TestGone"},
		"m/old": {"TestSplit", "TestOnlyNew"},
	}
	cur := testList{
		"m/a":   {"TestKept", "TestAdded"},
		"m/c":   {"TestMovedToC", "TestSplit"},
		"m/new": {"TestSplit", "TestOnlyNew"},
	}
	m := matchBase(base, cur)
	want := map[string][]string{
		"m/a":   {"TestKept"},
		"m/c":   {"TestMovedToC", "TestSplit"},
		"m/new": {"TestSplit", "TestOnlyNew"},
	}
	if !reflect.DeepEqual(m.run, want) {
		t.Errorf("run = %v, want %v", m.run, want)
	}
	if m.samePkg != 1 || len(m.moved) != 4 || !reflect.DeepEqual(m.missing, []string{"m/a TestGone"}) || m.notBase != 1 {
		t.Errorf("samePkg %d, moved %q, missing %q, notBase %d; want 1, 4 moves, [m/a TestGone], 1",
			m.samePkg, m.moved, m.missing, m.notBase)
	}
}

func TestRunFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "run.txt")
	run := map[string][]string{"m/a": {"TestB", "TestA"}, "m/x/y": {"Test.Dot"}}
	if err := writeRunFile(path, run, map[string]string{"m/a": "./a", "m/x/y": "./x/y"}); err != nil {
		t.Fatal(err)
	}
	if pat, ok := runFor(path, "./a"); !ok || pat != "^(TestA|TestB)$" {
		t.Errorf("runFor ./a = %q, %v", pat, ok)
	}
	if pat, ok := runFor(path, "./x/y"); !ok || pat != `^(Test\.Dot)$` {
		t.Errorf("runFor ./x/y = %q, %v", pat, ok)
	}
	if _, ok := runFor(path, "./x"); ok {
		t.Error("runFor ./x found a pattern")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
