package metatools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/broker"
	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// weatherAPI is a real HTTP API with its OpenAPI document; version switches
// the document to one with a second operation (a catalog change).
func weatherAPI(t *testing.T, version *atomic.Int32) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		extra := ""
		if version.Load() > 1 {
			extra = `, "/alerts": {"get": {"operationId": "listWeatherAlerts", "summary": "List active severe weather alerts",
				"responses": {"200": {"description": "ok"}}}}`
		}
		fmt.Fprintf(w, `{"openapi": "3.0.3", "info": {"title": "Weather", "version": "1"},
			"servers": [{"url": "http://%s"}],
			"paths": {"/weather/{city}": {"get": {"operationId": "getWeather", "summary": "Get the current weather of a city",
				"tags": ["forecast"],
				"parameters": [{"name": "city", "in": "path", "required": true, "schema": {"type": "string"}, "description": "City name"}],
				"responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object",
					"properties": {"city": {"type": "string"}, "tempC": {"type": "number"}}}}}}}}}%s}}`, r.Host, extra)
	})
	mux.HandleFunc("GET /weather/{city}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"city": r.PathValue("city"), "tempC": 21.5})
	})
	mux.HandleFunc("GET /alerts", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[]`))
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL
}

// brokerSource is a real broker with one registered Go tool (notes:save)
// and a catalog over weatherAPI.
func brokerSource(t *testing.T, version *atomic.Int32) (*BrokerSource, *catalog.Catalog) {
	t.Helper()
	api := weatherAPI(t, version)
	cat, err := catalog.New([]catalog.Source{{Name: "weather", SpecURL: api + "/openapi.json"}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cat.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	reg := broker.NewToolRegistry()
	if err := reg.Add(broker.ToolDefinition{
		Name:        "notes:save",
		Description: "Save a text note",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Examples:    []broker.ToolExample{{Description: "save a note", Code: `return await callTool("notes:save", {text: "hi"});`}},
		Handler: func(_ context.Context, in map[string]any, _ *broker.ExecutionContext) (any, error) {
			return map[string]any{"saved": in["text"]}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(&broker.BrokerOptions{Tools: reg, Catalog: cat, Engine: sandbox.NewInProcess(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return &BrokerSource{B: b}, cat
}

// TestMCPExecuteRegisteredOpenAPIAndUpstream runs one plan that calls a
// registered broker tool, an OpenAPI catalog action and an upstream MCP
// server's tool, over MCP on real HTTP.
func TestMCPExecuteRegisteredOpenAPIAndUpstream(t *testing.T) {
	var version atomic.Int32
	version.Store(1)
	src, cat := brokerSource(t, &version)
	f := newFixture(t, fixtureOptions{extra: []ToolSource{src}})

	var out SearchOutput
	structured(t, f.call(t, "meta:search", map[string]any{"queries": []string{"current weather in a city", "save a note"}, "topK": 1}), &out)
	got := map[string]string{}
	for _, r := range out.Tools {
		got[r.Name] = r.AppID
	}
	if got["weather_getWeather"] != "weather" || got["notes:save"] != "notes" {
		t.Fatalf("search: %+v", out.Tools)
	}

	script := `
const w = await callTool("weather_getWeather", {city: "Paris"});
const note = await callTool("notes:save", {text: w.city + " " + w.tempC});
const sum = await callTool("math:add", {a: 1, b: 2});
return {note: note.saved, sum: sum.sum};`
	var res sandbox.Result
	structured(t, f.call(t, "meta:execute", map[string]any{"script": script}), &res)
	if res.Status != sandbox.StatusOK || string(res.Result) != `{"note":"Paris 21.5","sum":3}` {
		t.Fatalf("execute: %s %s %+v", res.Status, res.Result, res.Error)
	}

	// The catalog action's input is validated against its schema.
	e := errorOf(t, f.call(t, "meta:invoke", map[string]any{"tool": "weather_getWeather", "input": map[string]any{}}))
	if e.Code != CodeValidationError || e.Field != "city" {
		t.Errorf("invoke without city: %+v", e)
	}
	var desc DescribeOutput
	structured(t, f.call(t, "meta:describe", map[string]any{"toolNames": []string{"weather_getWeather", "notes:save"}}), &desc)
	for _, d := range desc.Tools {
		switch d.Name {
		case "weather_getWeather":
			if !d.Annotations.ReadOnlyHint || string(d.OutputSchema) == "null" {
				t.Errorf("catalog action described as %+v", d)
			}
		case "notes:save":
			if d.UsageExamples[0].Description != "save a note" {
				t.Errorf("declared example not first: %+v", d.UsageExamples)
			}
		}
	}

	// A catalog change reaches the index through the broker's notification.
	for len(f.reloads) > 0 {
		<-f.reloads
	}
	version.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := f.index.Lookup("weather_listWeatherAlerts"); ok {
			break
		}
		select {
		case <-f.reloads:
		case <-ctx.Done():
			t.Fatalf("catalog change never reached the index; tools: %v", names(f.index.Tools()))
		}
	}
}

func names(ts []Tool) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return strings.Join(out, " ")
}

// TestIndexCloseUnregisters: an index registers one change listener on the
// broker it indexes and removes it on Close, so a broker kept across config
// reloads does not collect one listener per reload.
func TestIndexCloseUnregisters(t *testing.T) {
	b, err := broker.New(&broker.BrokerOptions{Engine: sandbox.NewInProcess(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	for i := range 3 {
		ix, err := NewIndex([]ToolSource{&BrokerSource{B: b}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := b.ToolsChangeListeners(); n != 1 {
			t.Fatalf("round %d: %d listeners with one open index, want 1", i, n)
		}
		ix.Close()
		ix.Close() // a second Close is harmless
		if n := b.ToolsChangeListeners(); n != 0 {
			t.Fatalf("round %d: %d listeners after Close, want 0", i, n)
		}
	}
}

// TestToolSourcesCarryPath: a catalog action's path reaches the search
// index through both tool sources (the broker's and the catalog's own), and
// a registry tool has none.
func TestToolSourcesCarryPath(t *testing.T) {
	var version atomic.Int32
	version.Store(1)
	src, cat := brokerSource(t, &version)
	fromCatalog, _ := (&CatalogSource{C: cat}).Tools(context.Background())
	fromBroker, _ := src.Tools(context.Background())
	for name, tools := range map[string][]Tool{"catalog": fromCatalog, "broker": fromBroker} {
		paths := map[string]string{}
		for _, tl := range tools {
			paths[tl.Name] = tl.Path
			if docOf(tl).Path != tl.Path {
				t.Errorf("%s: docOf(%s) lost the path", name, tl.Name)
			}
		}
		if p := paths["weather_getWeather"]; p != "/weather/{city}" {
			t.Errorf("%s source: weather_getWeather path %q, want /weather/{city} (tools %v)", name, p, paths)
		}
		if p, ok := paths["notes:save"]; ok && p != "" {
			t.Errorf("%s source: registry tool notes:save has path %q", name, p)
		}
	}
}
