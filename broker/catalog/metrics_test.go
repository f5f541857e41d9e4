package catalog

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsPerSource: a running catalog reports each source's version,
// last success, failure flag and operation count; fetches are counted; a
// closed catalog is no longer reported, and of two catalogs with the same
// source the one started last is.
func TestMetricsPerSource(t *testing.T) {
	m := NewMetrics()
	up := newUpstream(t, readTestdata(t, "shop.yaml"))
	start := func() *Catalog {
		c, err := New([]Source{{Name: "shop", SpecURL: up.srv.URL + "/openapi.yaml"}},
			&Options{PollInterval: -1, Now: func() time.Time { return fixedNow }, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := start()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	ops := len(c1.Response().Actions)
	version := c1.sources[0].state().specHash[:16]
	want := `
# HELP codemode_catalog_source_last_fetch_failed 1 when the source's last fetch failed (its last good actions are kept), else 0. The error is in the log.
# TYPE codemode_catalog_source_last_fetch_failed gauge
codemode_catalog_source_last_fetch_failed{source="shop"} 0
# HELP codemode_catalog_source_last_success_timestamp_seconds Unix time of the source's last successful fetch; 0 until one succeeds.
# TYPE codemode_catalog_source_last_success_timestamp_seconds gauge
codemode_catalog_source_last_success_timestamp_seconds{source="shop"} 1.795359845123e+09
# HELP codemode_catalog_source_info Always 1; the version label is the hash of the source's action names (it changes when actions come or go).
# TYPE codemode_catalog_source_info gauge
codemode_catalog_source_info{source="shop",version="` + version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "codemode_catalog_source_last_fetch_failed",
		"codemode_catalog_source_last_success_timestamp_seconds", "codemode_catalog_source_info"); err != nil {
		t.Fatal(err)
	}
	if v := gaugeValue(t, reg, "codemode_catalog_source_operations"); v != float64(ops) || ops == 0 {
		t.Fatalf("operations %v, want %d", v, ops)
	}

	// A failed refresh keeps the actions and raises the flag.
	up.setSpec(nil, http.StatusInternalServerError)
	if err := c1.Refresh(context.Background()); err == nil {
		t.Fatal("refresh of a failing source succeeded")
	}
	if v := gaugeValue(t, reg, "codemode_catalog_source_last_fetch_failed"); v != 1 {
		t.Fatalf("failed flag %v", v)
	}
	if ok, failed := testutil.ToFloat64(m.fetches.WithLabelValues("shop", "ok")), testutil.ToFloat64(m.fetches.WithLabelValues("shop", "error")); ok != 1 || failed != 1 {
		t.Fatalf("fetches ok %v error %v", ok, failed)
	}

	// A second catalog with the same source (a reload): reported once,
	// from the newer one.
	up.setSpec(readTestdata(t, "shop.yaml"), 0)
	c2 := start()
	if v := gaugeValue(t, reg, "codemode_catalog_source_last_fetch_failed"); v != 0 {
		t.Fatalf("the older catalog is reported: failed %v", v)
	}
	c1.Close()
	c2.Close()
	if n, err := testutil.GatherAndCount(reg, "codemode_catalog_source_info"); err != nil || n != 0 {
		t.Fatalf("closed catalogs still reported: %d %v", n, err)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s: not exactly one series", name)
	return 0
}
