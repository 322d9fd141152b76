package triage_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/store"
)

// Keys per task (issue 16, "Measured"): a fixed set of fix tasks, each
// done in chromium from the queue with the fewest keys the UI allows,
// counting keys (a character typed is a key) and gestures (a click, a drag, a double click), and the
// server's time answering the task's requests (its own request-duration
// histogram, the live stream left out). The test prints the table and
// fails when a task takes more actions than maxActions records.
//
// Each task is done two ways: "type" types the value, as the UI before
// select-to-fill allowed (the same script runs at main: TRIAGE_KEYS=type
// runs only it); "select" takes it from the message with one gesture.

// maxActions are the recorded keys + gestures per task and way: a change
// that needs more fails the test; one that needs fewer should lower them.
var maxActions = map[string]int{
	"missing required field/type":   18,
	"missing required field/select": 4,
	"ungrounded id/type":            7,
	"ungrounded id/select":          4,
	"wrong enum/type":               13,
	"parse failure/type":            3,
}

// keyTask is one fix task: the item it fixes, how to do it, and what
// the result must hold.
type keyTask struct {
	name  string
	text  string
	reply []string
	// ways are the scripts by way ("type", "select"), each a list of
	// counted actions; the task's item is open in the queue before.
	ways map[string][]keyAction
	// want is a value the approved record must hold ("key":value).
	want string
}

// keyAction is one counted action: its actions, and how many keys and
// gestures it takes.
type keyAction struct {
	keys, gestures int
	do             []chromedp.Action[chromedp.Void]
}

func press(keys string) keyAction {
	return keyAction{keys: len([]rune(keys)), do: []chromedp.Action[chromedp.Void]{realKeys(keys)}}
}

// realKeys sends each key as a browser does: one keyDown carrying the
// key's text, then keyUp. chromedp.KeyEvent sends the text as a separate
// char event, which a page's preventDefault on keydown cannot stop, so a
// shortcut that moves the focus into a field (e, r) would also type its
// letter there.
func realKeys(keys string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			var down *input.DispatchKeyEventParams
			for _, ev := range kb.Encode(r) {
				switch ev.Type {
				case input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeRawKeyDown:
					e := *ev
					e.Type, down = input.DispatchKeyEventTypeKeyDown, &e
				case input.DispatchKeyEventTypeChar:
					down.Text, down.UnmodifiedText = ev.Text, ev.UnmodifiedText
				case input.DispatchKeyEventTypeKeyUp:
					if err := chromedp.Do(ctx, dispatchKey(down), dispatchKey(ev)); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

func dispatchKey(p *input.DispatchKeyEventParams) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *p)
		return err
	})
}

func clickOn(sel string) keyAction {
	return keyAction{gestures: 1, do: []chromedp.Action[chromedp.Void]{chromedp.Click(chromedp.CSS(sel))}}
}

// waitFor is no action, only a wait (for the page's script).
func waitFor(expr string) keyAction {
	return keyAction{do: []chromedp.Action[chromedp.Void]{poll(expr)}}
}

// selectText double-clicks, or drags over, the nth (from 1) occurrence
// of word in the message: one gesture.
func selectText(word string, nth int) keyAction {
	return keyAction{gestures: 1, do: []chromedp.Action[chromedp.Void]{chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(() => {
			const walker = document.createTreeWalker(document.querySelector('#msgtext'), NodeFilter.SHOW_TEXT);
			let seen = 0, n;
			while ((n = walker.nextNode())) {
				let i = -1;
				while ((i = n.data.indexOf(%q, i + 1)) >= 0) {
					if (++seen < %d) continue;
					const r = document.createRange();
					r.setStart(n, i); r.setEnd(n, i + %d);
					const rs = r.getClientRects(), a = rs[0], z = rs[rs.length - 1];
					return [a.left + 1, (a.top + a.bottom) / 2, z.right - 1, (z.top + z.bottom) / 2];
				}
			}
			return [];
		})()`, word, nth, len([]rune(word)))))
		if err != nil {
			return err
		}
		if len(box) != 4 {
			return fmt.Errorf("%q (%d) is not in the message", word, nth)
		}
		held := func(p *input.DispatchMouseEventParams) { p.Buttons = 1 }
		return chromedp.Do(ctx,
			chromedp.MouseEvent(chromedp.MousePressed, box[0], box[1], chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(chromedp.MouseMoved, (box[0]+box[2])/2, box[3], chromedp.ButtonLeft, held),
			chromedp.MouseEvent(chromedp.MouseMoved, box[2], box[3], chromedp.ButtonLeft, held),
			chromedp.MouseEvent(chromedp.MouseReleased, box[2], box[3], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	})}}
}

func TestBrowserKeysPerTask(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newBundle(t, bundleOpts{registry: reg})
	chromiumPath(t)
	t.Parallel()
	b.reviewer(t, "alice", "correct horse battery")
	g := newBrowserRig(t, b, 5*time.Minute)
	tab := g.tab(t)
	g.login(t, tab, "alice", "correct horse battery")

	noName := strings.Replace(strings.Replace(albertRepair, `"full_name":"Albert Sanders",`, "", 1), "7149958241", "7149958247", 1)
	badEnum := strings.Replace(strings.Replace(albertRepair, `"manage_dispute_bill"`, `"dispute_bill"`, 1), "7149958241", "7149958247", 1)
	// Nearly JSON: prose, single quotes, a trailing comma, a fence.
	nearly := "Here is the record:\n```json\n" + strings.ReplaceAll(strings.Replace(noName, `"intent"`, `"full_name":"Albert Sanders","intent"`, 1), `"`, `'`) +
		"\n```"
	nearly = strings.Replace(nearly, "}\n```", ",}\n```", 1)
	checked := waitFor(`document.querySelector('#check-status').textContent.trim() === 'valid'`)
	// c claims the item and opens it: the page is the item's, claimed.
	c := keyAction{keys: 1, do: []chromedp.Action[chromedp.Void]{realKeys("c"),
		chromedp.WaitVisible(chromedp.CSS(`#lease .badge.mine`)), poll(`document.readyState === 'complete'`)}}
	tasks := []keyTask{
		{name: "missing required field", text: albertText, reply: []string{albertFirst, noName}, want: `"full_name":"Albert Sanders"`,
			ways: map[string][]keyAction{
				"type":   {c, press("e"), press("Albert Sanders"), press(kb.Escape), press("a")},
				"select": {c, press("e"), selectText("Albert Sanders", 1), press("a")},
			}},
		{name: "ungrounded id", text: albertText, reply: []string{albertFirst, albertRepair}, want: `"order_id":"7149958247"`,
			ways: map[string][]keyAction{
				// Only the last digit differs: the fewest keys change it.
				"type":   {c, press("e"), press(kb.End), press(kb.Backspace), press("7"), press(kb.Escape), press("a")},
				"select": {c, press("e"), selectText("7149958247", 1), press("a")},
			}},
		{name: "wrong enum", text: albertText, reply: []string{badEnum}, want: `"intent":"manage_dispute_bill"`,
			ways: map[string][]keyAction{
				// The shortest prefix that picks the option in the list.
				"type": {c, press("e"), press("manage_di"), checked, press(kb.Escape), press("a")},
			}},
		{name: "parse failure", text: albertText, reply: []string{nearly}, want: `"full_name":"Albert Sanders"`,
			ways: map[string][]keyAction{
				// The lenient draft validates; every field is confirmed.
				"type": {c, clickOn("#confirm-lenient"), press("a")},
			}},
	}

	ways := []string{"type", "select"}
	if w := os.Getenv("TRIAGE_KEYS"); w != "" {
		ways = strings.Split(w, ",")
	}
	serverSeconds := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() != "extractq_triage_http_request_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				stream := false
				for _, l := range m.GetLabel() {
					if l.GetName() == "route" && strings.HasSuffix(l.GetValue(), "/events") {
						stream = true
					}
				}
				if !stream {
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
		return sum
	}

	var table strings.Builder
	table.WriteString("| task | way | keys | gestures | keys + gestures | recorded at most | server time (ms) |\n|---|---|---|---|---|---|---|\n")
	ctx := context.Background()
	for _, task := range tasks {
		for _, way := range ways {
			script, ok := task.ways[way]
			if !ok {
				continue
			}
			name := task.name + "/" + way
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				batch := fmt.Sprintf("b-keys-%d", b.seq.Add(1))
				if err := b.st.BatchInsert(ctx, b.st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "customer_message"}); err != nil {
					t.Fatal(err)
				}
				b.batch = batch
				_, msg := b.failedItem(t, "customer_message", task.text, task.reply...)
				g.step(t, tab, "the task's queue", chromedp.Navigate(g.web.URL+"/?batch="+batch), chromedp.WaitVisible(chromedp.ID("items")),
					poll(`document.querySelectorAll('#items tbody tr.row').length === 1`))
				before := serverSeconds()
				keys, gestures := 0, 0
				for i, a := range script {
					keys += a.keys
					gestures += a.gestures
					g.step(t, tab, fmt.Sprintf("%s: action %d", name, i+1), a.do...)
				}
				// Approved: the result is stored, and the page the approval
				// leads to (the queue: no item is left in the batch) shows.
				var cur store.Extraction
				for deadline := time.Now().Add(time.Minute); ; {
					var err error
					if cur, err = b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: msg}); err == nil {
						break
					}
					if time.Now().After(deadline) {
						var st any
						g.eval(t, tab, `({loc: location.href, status: (document.querySelector('#check-status')||{}).textContent, msg: (document.querySelector('#action-msg')||{}).textContent})`, &st)
						t.Fatalf("%s: not approved: %v; page %v", name, err, st)
					}
					time.Sleep(20 * time.Millisecond) // polling the database with a deadline
				}
				g.step(t, tab, "the page after", chromedp.WaitVisible(chromedp.ID("flash")))
				ms := (serverSeconds() - before) * 1000
				if got := strings.ReplaceAll(string(cur.Data), `": `, `":`); !strings.Contains(got, task.want) || cur.CreatedBy != "alice" {
					t.Errorf("%s: result %s by %s, want %s", name, cur.Data, cur.CreatedBy, task.want)
				}
				limit := maxActions[name]
				fmt.Fprintf(&table, "| %s | %s | %d | %d | %d | %d | %.0f |\n", task.name, way, keys, gestures, keys+gestures, limit, ms)
				if keys+gestures > limit {
					t.Errorf("%s takes %d keys and gestures; recorded at most %d", name, keys+gestures, limit)
				}
			})
		}
	}
	t.Log("keys per task (server time: the server's own request durations, the live stream left out):\n" + table.String())
}
