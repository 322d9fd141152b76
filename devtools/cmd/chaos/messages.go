package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// writeMessages writes n JSONL lines to w, taken in turn from the lines of
// the source file: the first pass keeps each line's id, later passes give
// the copy id "<id>~<pass>" (pass 2, 3, ...). Texts and every other key
// are kept, so the workers extract real customer messages.
func writeMessages(w io.Writer, sourcePath string, n int) error {
	f, err := os.Open(sourcePath)
	if err != nil {
		return err
	}
	defer f.Close()
	var src []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(line, &obj); err != nil {
			return fmt.Errorf("%s line %d: %w", sourcePath, len(src)+1, err)
		}
		if _, ok := obj["id"]; !ok {
			return fmt.Errorf("%s line %d: no id", sourcePath, len(src)+1)
		}
		src = append(src, obj)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(src) == 0 {
		return errors.New(sourcePath + ": no messages")
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range n {
		obj := src[i%len(src)]
		if pass := i/len(src) + 1; pass > 1 {
			var id any
			if err := json.Unmarshal(obj["id"], &id); err != nil {
				return err
			}
			var s string
			switch v := id.(type) {
			case string:
				s = v
			case float64:
				s = strconv.FormatFloat(v, 'f', -1, 64)
			default:
				return fmt.Errorf("%s: id %s is not a string or a number", sourcePath, obj["id"])
			}
			cp := make(map[string]json.RawMessage, len(obj))
			for k, v := range obj {
				cp[k] = v
			}
			cp["id"], _ = json.Marshal(s + "~" + strconv.Itoa(pass))
			obj = cp
		}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	return bw.Flush()
}
