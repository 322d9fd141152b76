package llmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeRequestMatchesDecoder checks that decodeRequest decodes every
// body, good or bad, as json.Decoder.Decode does, with the schema cut out
// or not.
func TestDecodeRequestMatchesDecoder(t *testing.T) {
	t.Parallel()
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(testSchema)); err != nil {
		t.Fatal(err)
	}
	schema := compact.String()
	rf := func(s string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + s + `,"strict":true}}}`
	}
	tools := func(s string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"record","parameters":` + s + `}}],"tool_choice":{"type":"function","function":{"name":"record"}}}`
	}
	bodies := []string{
		rf(schema),
		tools(schema),
		rf(schema) + " trailing text",
		rf(schema) + "\n",
		rf(schema)[:len(rf(schema))-1],
		strings.Replace(rf(schema), `"model":"m"`, `"model":`+schema, 1),
		strings.Replace(rf(schema), `"model":"m"`, `"max_tokens":`+schema, 1),
		strings.Replace(tools(schema), `{"type":"function","function":{"name":"record"}}`, schema, 1),
		tools(`{"type":"object","properties":{"x":` + schema + `}}`),
		strings.Replace(rf(schema), `"hi"`, `[{"type":"text","text":"hi"},`+schema+`]`, 1),
		rf(schema) + rf(schema),
		strings.Replace(rf(schema), `"model":"m"`, `"model":"m","tools":[{"type":"function","function":{"name":"t","parameters":`+schema+`}}]`, 1),
		strings.Replace(rf(schema), `"hi"`, `"`+string(schemaMarker)+`"`, 1),
		strings.Replace(tools(string(schemaMarker)), `{"type":"function","function":{"name":"record"}}`, schema, 1),
		rf(schema + "1"),
		rf(schema[:len(schema)-1] + `,"x":1}`),
		strings.Replace(rf(schema), `"response_format"`, `"RESPONSE_FORMAT"`, 1),
		strings.Replace(rf(schema), `"model":"m"`, `"response_format":{"type":"json_schema","json_schema":{"schema":{}}},"model":"m"`, 1),
		strings.Replace(rf(schema), `"strict":true`, `"strict":"yes"`, 1),
	}
	var k knownSchemas
	for i, body := range bodies {
		for pass := range 2 { // the first pass of the first body learns the schema
			var want chatRequest
			wantErr := json.NewDecoder(strings.NewReader(body)).Decode(&want)
			var got chatRequest
			gotErr := k.decodeRequest([]byte(body), &got)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("body %d pass %d: error %v, want %v", i, pass, gotErr, wantErr)
			}
			if wantErr == nil && !reflect.DeepEqual(normalRequest(got), normalRequest(want)) {
				t.Fatalf("body %d pass %d: decoded\n%+v\nwant\n%+v", i, pass, got, want)
			}
		}
	}
	if list := k.list.Load(); list == nil || len(*list) != 3 || string((*list)[2]) != schema {
		t.Errorf("known schemas are not the three large schemas sent, most recent first")
	}
	for _, body := range []string{rf(schema), tools(schema)} {
		var r chatRequest
		if !k.decodeCut([]byte(body), &r) {
			t.Errorf("the known schema was not cut out of %.60s...", body)
		}
	}
}

// normalRequest makes empty and nil raw fields of r compare equal.
func normalRequest(r chatRequest) chatRequest {
	norm := func(raw *json.RawMessage) {
		if len(*raw) == 0 {
			*raw = nil
		}
	}
	norm(&r.ToolChoice)
	for _, p := range r.schemaSlots() {
		norm(p)
	}
	return r
}
