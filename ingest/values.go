package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/extractq/extractq/pipeline"
)

// Checks of the values Postgres would refuse, made before the insert so
// the rejection names the field: Postgres's own error does not.

// Limits of a Postgres numeric, which holds a jsonb number (PostgreSQL
// 15, src/backend/utils/adt/numeric.c: a weight of at most 32767 base-10000
// digits, a display scale of at most NUMERIC_DSCALE_MAX = 0x3FFF, and
// an exponent below INT_MAX/2 in the input).
const (
	// pgNumericMaxIntDigits is the most digits before the decimal point.
	pgNumericMaxIntDigits = 131072
	// pgNumericMaxScale is the most digits after the decimal point, as
	// written (trailing zeros count) less the exponent.
	pgNumericMaxScale = 16383
	// pgNumericMaxExponent bounds the exponent's absolute value.
	pgNumericMaxExponent = 1<<30 - 1
)

// numberFits reports whether Postgres jsonb can hold the JSON number s
// (valid JSON number syntax): numeric_in's rules, so that 1e1000000, or
// 0.5e-16383, is refused here rather than by the database (SQLSTATE
// 22003, "value overflows numeric format").
func numberFits(s string) bool {
	s = strings.TrimPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	e := int64(0)
	if hasExp {
		exp = strings.TrimPrefix(exp, "+")
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || n >= pgNumericMaxExponent || n <= -pgNumericMaxExponent {
			return false // out of int64 range too
		}
		e = n
	}
	if max(0, int64(len(frac))-e) > pgNumericMaxScale {
		return false
	}
	digits := intPart + frac
	k := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if k < 0 {
		return true // zero
	}
	// The decimal weight of the first digit that is not 0.
	return int64(len(intPart)-1-k)+e < pgNumericMaxIntDigits
}

// checkNumbers refuses metadata (compact JSON, keys sorted) holding a
// number Postgres jsonb cannot hold, naming it by its path ("a.b[2]").
func checkNumbers(doc []byte) error {
	if !hasUnfitNumber(doc) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("metadata: %v", err)
	}
	path, num, found := unfitNumber(v, "")
	if !found {
		return nil
	}
	if len(num) > 40 {
		num = num[:37] + "..."
	}
	return fmt.Errorf("metadata %q: the number %s is out of the range the database stores (Postgres jsonb numbers: "+
		"at most %d digits before the decimal point and %d after); send it as a string to keep it",
		path, num, pgNumericMaxIntDigits, pgNumericMaxScale)
}

// hasUnfitNumber scans compact JSON for a number that does not fit,
// outside strings, without decoding it.
func hasUnfitNumber(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(doc) && strings.IndexByte("+-.0123456789eE", doc[j]) >= 0 {
				j++
			}
			if !numberFits(string(doc[i:j])) {
				return true
			}
			i = j - 1
		}
	}
	return false
}

// unfitNumber finds the first number of v (keys in sorted order) that
// does not fit, and its path below prefix.
func unfitNumber(v any, prefix string) (path, num string, found bool) {
	switch v := v.(type) {
	case json.Number:
		if !numberFits(v.String()) {
			return prefix, v.String(), true
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if path, num, found := unfitNumber(v[k], p); found {
				return path, num, true
			}
		}
	case []any:
		for i, e := range v {
			if path, num, found := unfitNumber(e, fmt.Sprintf("%s[%d]", prefix, i)); found {
				return path, num, true
			}
		}
	}
	return "", "", false
}

// nulError is the error of metadata meta (a map of raw JSON values, or
// of CSV cells) holding a NUL character, naming where: the path of the
// first string or key (keys in sorted order) with one.
func nulError(meta any) error {
	var v any
	b, _ := json.Marshal(meta)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&v) == nil {
		if path, isKey, ok := nulPath(v, ""); ok {
			if isKey {
				return fmt.Errorf("metadata key %q contains a NUL character (U+0000), which the database cannot store", path)
			}
			return fmt.Errorf("metadata %q: the string contains a NUL character (U+0000), which the database cannot store", path)
		}
	}
	return errors.New("metadata contains a NUL character (U+0000), which the database cannot store")
}

// nulPath finds the first string of v (keys in sorted order) holding a
// NUL, and its path below prefix ("a.b[2]"); isKey says the NUL is in the
// last key of the path.
func nulPath(v any, prefix string) (path string, isKey, found bool) {
	switch v := v.(type) {
	case string:
		return prefix, false, strings.ContainsRune(v, 0)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if strings.ContainsRune(k, 0) {
				return p, true, true
			}
			if path, isKey, found := nulPath(v[k], p); found {
				return path, isKey, true
			}
		}
	case []any:
		for i, e := range v {
			if path, isKey, found := nulPath(e, fmt.Sprintf("%s[%d]", prefix, i)); found {
				return path, isKey, true
			}
		}
	}
	return "", false, false
}

// checkKeyRaw refuses a key part (field "id" or "source") whose raw
// value, as read (a JSON string literal with its quotes, or a CSV cell),
// is not valid UTF-8 or (JSON) holds a lone UTF-16 surrogate escape: both
// could only be stored changed (U+FFFD), and an id is kept byte for byte,
// so two ids would become one.
func checkKeyRaw(field string, raw []byte, isJSON bool) error {
	if !utf8.Valid(raw) {
		bad := raw
		for i := 0; i < len(raw); {
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				bad = raw[i : i+1]
				break
			}
			i += size
		}
		shown := raw
		if isJSON && len(raw) >= 2 {
			shown = raw[1 : len(raw)-1]
		}
		return fmt.Errorf("%q is not valid UTF-8 (byte 0x%02X in %s): ids and sources are kept byte for byte, so it is refused, never changed; "+
			"convert the input to UTF-8 (it may be Latin-1: iconv -f latin1 -t utf-8)", field, bad[0], quoteShort(string(shown)))
	}
	if isJSON && pipeline.HasLoneSurrogate(string(raw)) {
		return fmt.Errorf("%q holds a lone UTF-16 surrogate escape (such as \\ud800 without its pair), which is no character: "+
			"ids and sources are kept byte for byte, so it is refused, never changed", field)
	}
	return nil
}
