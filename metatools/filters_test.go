package metatools

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestSearchFilters: tags, readOnly and destructive keep only the tools
// whose tags and annotations match (MCP's defaults for undeclared hints),
// at the top level and inside filter.
func TestSearchFilters(t *testing.T) {
	yes, no := true, false
	src := &StaticSource{List: []Tool{
		{Name: "crm:listContacts", AppID: "crm", Description: "List contacts", Tags: []string{"Contacts"},
			Annotations: &Annotations{ReadOnlyHint: &yes}},
		{Name: "crm:createContact", AppID: "crm", Description: "Create a contact", Tags: []string{"contacts", "write"},
			Annotations: &Annotations{DestructiveHint: &no}},
		{Name: "crm:deleteContact", AppID: "crm", Description: "Delete a contact"}, // no hints: destructive
		{Name: "mail:sendContactCard", AppID: "mail", Description: "Send a contact card", Tags: []string{"mail"}},
	}}
	ix, err := NewIndex([]ToolSource{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := NewService(ix, nil)
	names := func(in SearchInput) map[string]bool {
		t.Helper()
		in.Queries = []string{"contact"}
		out, err := s.Search(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, r := range out.Tools {
			m[r.Name] = true
		}
		return m
	}
	cases := []struct {
		name string
		in   SearchInput
		want []string
	}{
		{"tags, any of, case-insensitive", SearchInput{Tags: []string{"CONTACTS"}}, []string{"crm:listContacts", "crm:createContact"}},
		{"readOnly", SearchInput{ReadOnly: &yes}, []string{"crm:listContacts"}},
		{"not readOnly", SearchInput{ReadOnly: &no}, []string{"crm:createContact", "crm:deleteContact", "mail:sendContactCard"}},
		{"destructive (undeclared counts)", SearchInput{Destructive: &yes}, []string{"crm:deleteContact", "mail:sendContactCard"}},
		{"not destructive", SearchInput{Destructive: &no}, []string{"crm:listContacts", "crm:createContact"}},
		{"service and tag", SearchInput{AppIDs: []string{"crm"}, Tags: []string{"write"}}, []string{"crm:createContact"}},
		{"inside filter", SearchInput{Filter: &SearchFilter{Tags: []string{"mail"}, Destructive: &yes}}, []string{"mail:sendContactCard"}},
	}
	for _, c := range cases {
		got := names(c.in)
		if len(got) != len(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			continue
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		}
	}
}

// TestSearchFiltersOverMCP: the filters pass meta:search's strict argument
// decoding and its advertised input schema.
func TestSearchFiltersOverMCP(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var out SearchOutput
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"contacts"}, "tags": []string{"contacts"}, "readOnly": true,
		"filter": map[string]any{"destructive": false}}), &out)
	if len(out.Tools) != 1 || out.Tools[0].Name != "crm:listContacts" || out.Tools[0].MatchedQueries != nil {
		t.Fatalf("filtered search: %+v", out.Tools)
	}
}

// TestExcludedNotFoundEchoIsBounded: the excluded_tool_not_found warning
// quotes at most MaxEchoedNames of the caller's names, each cut to
// MaxEchoedNameBytes, once each, and counts them all in its message; it
// used to echo 1,000 names of any length (a 4 MiB request, a 4 MiB warning).
func TestExcludedNotFoundEchoIsBounded(t *testing.T) {
	ix, err := NewIndex([]ToolSource{&StaticSource{List: []Tool{{Name: "crm:listContacts", AppID: "crm", Description: "List contacts"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := NewService(ix, nil)
	long := strings.Repeat("x", 4000)
	excluded := []string{"crm:listContacts", "nope:a", "nope:a"} // an existing name and a repeat: not echoed
	for i := range MaxFilterNames - len(excluded) {
		excluded = append(excluded, fmt.Sprintf("%s%d", long, i))
	}
	out, err := s.Search(context.Background(), SearchInput{Queries: []string{"contacts"}, ExcludeToolNames: excluded})
	if err != nil {
		t.Fatal(err)
	}
	var w *Warning
	for i := range out.Warnings {
		if out.Warnings[i].Type == "excluded_tool_not_found" {
			w = &out.Warnings[i]
		}
	}
	if w == nil {
		t.Fatalf("no excluded_tool_not_found warning: %+v", out.Warnings)
	}
	if want := fmt.Sprintf("%d excluded tool name(s) are not in the index; the first %d are listed", MaxFilterNames-2, MaxEchoedNames); w.Message != want {
		t.Errorf("message %q, want %q", w.Message, want)
	}
	if len(w.AffectedTools) != MaxEchoedNames || w.AffectedTools[0] != "nope:a" || w.AffectedTools[1] != long[:MaxEchoedNameBytes]+"…" {
		t.Fatalf("affectedTools: %d names, first two %.40q", len(w.AffectedTools), w.AffectedTools[:min(2, len(w.AffectedTools))])
	}
	for _, n := range w.AffectedTools {
		if len(n) > MaxEchoedNameBytes+len("…") {
			t.Errorf("an echoed name of %d bytes", len(n))
		}
	}
}
