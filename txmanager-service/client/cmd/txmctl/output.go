package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// apiJSON writes messages as the HTTP API does: every field, lowerCamelCase names.
var apiJSON = protojson.MarshalOptions{EmitUnpopulated: true}

// writeJSON prints one message as an indented JSON object.
func writeJSON(w io.Writer, m proto.Message) error {
	raw, err := apiJSON.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// writeJSONList prints messages as one indented JSON array.
func writeJSONList[M proto.Message](w io.Writer, list []M) error {
	items := make([]json.RawMessage, 0, len(list))
	for _, m := range list {
		raw, err := apiJSON.Marshal(m)
		if err != nil {
			return err
		}
		items = append(items, raw)
	}
	out, err := json.MarshalIndent(items, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

// writeJSONLine prints one message on one line (JSON Lines, for streams).
func writeJSONLine(w io.Writer, m proto.Message) error {
	raw, err := apiJSON.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", raw)
	return err
}

// writeJSONValue prints v, not an API message, on one line (JSON Lines).
func writeJSONValue(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", raw)
	return err
}

// table prints rows under a header, aligned.
type table struct {
	w *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.w.Flush() }

// fields prints name: value lines, aligned, for one object.
func fields(w io.Writer, pairs ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s:\t%s\n", pairs[i], orDash(pairs[i+1]))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil || (ts.GetSeconds() <= 0 && ts.GetNanos() == 0) {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}
