package caddymodules

import (
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestBadDurationsAndSizesFailTheLoad: a duration, size or count of any
// block that is negative, 0 where 0 would silently be the default, or past
// what its type holds fails the load with a message naming the option,
// whether or not the feature it belongs to is used. Each case goes
// through the Caddyfile adapter, or is JSON, and then caddy.Load. Before,
// credentials' TTLs were checked only when a source took user credentials,
// auth's server limits only in orchestrated mode, meta's connect_timeout
// and call_timeout and the worker pool's settings not at all below zero
// (min_size -2 started no worker, queue_timeout -1s waited 10s), an
// explicit 0 in many blocks meant the default (access_token_ttl 0 was
// 15m), and max_body_size 9EiB wrapped to a negative size.
func TestBadDurationsAndSizesFailTheLoad(t *testing.T) {
	// Transparent mode without a user-credential source: the orchestrated
	// server's options and the credentials block are unused.
	const transparent = `mode transparent
			development
			provider_url http://127.0.0.1:1
			expected_audience http://127.0.0.1:1/mcp`
	caddyfile := func(app string) string {
		return "{\n\tadmin off\n\tpersist_config off\n\tcodemode {\n" + app + "\n\t}\n}\n"
	}
	const jsonAuth = `"auth":{"mode":"transparent","development":true,"provider_url":"http://127.0.0.1:1","expected_audience":"http://127.0.0.1:1/mcp"`
	jsonApp := func(app string) string {
		return `{"admin":{"disabled":true,"config":{"persist":false}},"logging":{"logs":{"default":{"level":"ERROR"}}},"apps":{"codemode":{` + app + `}}}`
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		// The bases load: what fails below fails for its option.
		{"caddyfile base", caddyfile("auth {\n" + transparent + "\n}\ncredentials {\nconnection_ttl 1h\n}"), ""},
		{"json base", jsonApp(jsonAuth + `},"credentials":{"connection_ttl":3600000000000}`), ""},

		{"credentials connection_ttl negative", caddyfile("credentials {\nconnection_ttl -1s\n}"), `connection_ttl: "-1s" is not a positive duration`},
		{"credentials connection_ttl 0", caddyfile("credentials {\nconnection_ttl 0\n}"), `connection_ttl: "0" is not a positive duration`},
		{"credentials refresh_before 0", caddyfile("credentials {\nrefresh_before 0s\n}"), `refresh_before: "0s" is not a positive duration`},
		{"credentials session_ttl negative", caddyfile("credentials {\nsession_ttl -1h\n}"), `session_ttl: "-1h" is not a positive duration`},
		{"json credentials connection_ttl negative, unused", jsonApp(`"credentials":{"connection_ttl":-1000000000}`), "codemode credentials: connection_ttl: -1s is negative"},
		{"json credentials session_ttl negative, unused", jsonApp(jsonAuth + `},"credentials":{"session_ttl":-1}`), "codemode credentials: session_ttl: -1ns is negative"},

		{"auth access_token_ttl 0", caddyfile("auth {\n" + transparent + "\nrefresh {\naccess_token_ttl 0\n}\n}"), "access_token_ttl: 0 is not a positive duration"},
		{"auth refresh_token_ttl 0", caddyfile("auth {\n" + transparent + "\nrefresh {\nrefresh_token_ttl 0s\n}\n}"), "refresh_token_ttl: 0 is not a positive duration"},
		{"auth registered_client_ttl 0", caddyfile("auth {\n" + transparent + "\nregistered_client_ttl 0\n}"), "registered_client_ttl: 0 is not a positive duration"},
		{"auth fetch_timeout 0", caddyfile("auth {\n" + transparent + "\nclient_id_metadata {\nfetch_timeout 0\n}\n}"), "fetch_timeout: 0 is not a positive duration"},
		{"auth max_cache_ttl 0", caddyfile("auth {\n" + transparent + "\nclient_id_metadata {\nmax_cache_ttl 0\n}\n}"), "max_cache_ttl: 0 is not a positive duration"},
		{"auth key_rotation_days past what a duration holds", caddyfile("auth {\n" + transparent + "\nlocal {\nkey_rotation_days 213504\n}\n}"), "key_rotation_days: 213504 days is too long"},
		{"auth key_rotation_days negative", caddyfile("auth {\n" + transparent + "\nlocal {\nkey_rotation_days -30\n}\n}"), `key_rotation_days: want a non-negative integer, got "-30"`},
		{"auth access_token_ttl seconds past what a duration holds", caddyfile("auth {\n" + transparent + "\nrefresh {\naccess_token_ttl 9300000000\n}\n}"), `access_token_ttl: "9300000000" seconds is too long`},
		{"auth password_check_wait over a minute", caddyfile("auth {\n" + transparent + "\npassword_check_wait 2m\n}"), "password_check_wait: 2m0s is more than 1m0s"},
		{"auth password_check_wait fraction", caddyfile("auth {\n" + transparent + "\npassword_check_wait 1500ms\n}"), "password_check_wait: 1.5s is not a non-negative whole number of seconds"},
		{"json auth max_registered_clients negative, transparent", jsonApp(jsonAuth + `,"max_registered_clients":-1}`), "max_registered_clients: -1 is negative"},
		{"json auth max_pending_authorizations negative, transparent", jsonApp(jsonAuth + `,"max_pending_authorizations":-1}`), "max_pending_authorizations: -1 is negative"},
		{"json auth max_keys negative, transparent", jsonApp(jsonAuth + `,"local":{"max_keys":-1}}`), "local: max_keys: -1 is negative"},
		{"json auth max_document_bytes negative, transparent", jsonApp(jsonAuth + `,"client_id_metadata":{"max_document_bytes":-1}}`), "client_id_metadata: max_document_bytes: -1 is negative"},
		{"json auth password_check_wait negative, transparent", jsonApp(jsonAuth + `,"password_check_wait":-1000000000}`), "password_check_wait: -1s is not a non-negative whole number of seconds"},

		{"broker drain_timeout 0", caddyfile("broker {\ndrain_timeout 0\n}"), `drain_timeout: "0" is not a positive duration`},
		{"broker session_timeout negative", caddyfile("broker {\nsession_timeout -5m\n}"), `session_timeout: "-5m" is not a positive duration`},
		{"broker poll_interval 0", caddyfile("broker {\npoll_interval 0\n}"), `poll_interval: "0" is not a positive duration`},
		{"broker max_body_size past int64", caddyfile("broker {\nmax_body_size 9EiB\n}"), `max_body_size: "9EiB" is not a size`},
		{"broker openapi timeout 0", caddyfile("broker {\nopenapi pets ./pets.json {\ntimeout 0\n}\n}"), `timeout: "0" is not a positive duration`},
		{"storage redis timeout 0", caddyfile("storage redis 127.0.0.1:1 {\ntimeout 0\n}"), `timeout: "0" is not a positive duration`},
		{"storage redis dial_timeout negative", caddyfile("storage redis 127.0.0.1:1 {\ndial_timeout -1s\n}"), `dial_timeout: "-1s" is not a positive duration`},

		{"meta upstream call_timeout 0", caddyfile("meta {\nupstream gh {\nurl http://127.0.0.1:1/mcp\ncall_timeout 0\n}\n}"), `call_timeout: "0" is not a positive duration`},
		{"meta embedding timeout 0", caddyfile("meta {\nembedding {\nstrategy ml\nurl http://127.0.0.1:1/v1/embeddings\nmodel m\ntimeout 0\n}\n}"), `timeout: "0" is not a positive duration`},
		{"mcp session_timeout 0", "http://127.0.0.1:0 {\n\tcodemode_mcp {\n\t\tsession_timeout 0\n\t}\n}\n", "session_timeout: 0 is neither a duration nor never"},
		{"meta list_ttl 0", caddyfile("meta {\nlist_ttl 0\n}"), `list_ttl: want a positive duration like 5m, got "0"`},
		{"json meta connect_timeout negative", jsonApp(`"meta":{"connect_timeout":-1000000000}`), "codemode meta: connect_timeout -1s is negative"},
		{"json meta call_timeout negative", jsonApp(`"meta":{"no_broker":true,"upstreams":[{"name":"gh","url":"http://127.0.0.1:1/mcp","call_timeout":-1000000000}]}`), `codemode meta: upstream "gh": call_timeout -1s is negative`},

		// Counts: an explicit 0 that would silently be the default fails, naming
		// what to write; a documented 0 (none) loads.
		{"documented zeros", caddyfile("auth {\n" + transparent + "\nlocal {\nkey_rotation_days 0\n}\n}\nsandbox {\npool {\nmin 0\nspare 0\nqueue_size -1\nmax_executions -1\n}\n}"), ""},
		{"broker max_sessions 0", caddyfile("broker {\nmax_sessions 0\n}"), `max_sessions: "0" is not a positive integer (leave the option out for its default)`},
		{"broker max_tool_calls 0", caddyfile("broker {\nmax_tool_calls 0\n}"), `max_tool_calls: "0" is not a positive integer`},
		{"broker max_sessions_per_principal 0", caddyfile("broker {\nmax_sessions_per_principal 0\n}"), `max_sessions_per_principal: "0" is not a positive integer`},
		{"storage redis pool_size 0", caddyfile("storage redis 127.0.0.1:1 {\npool_size 0\n}"), `pool_size: "0" is not a positive integer`},
		{"auth max_registered_clients 0", caddyfile("auth {\n" + transparent + "\nmax_registered_clients 0\n}"), `max_registered_clients: "0" is not a positive integer`},
		{"auth max_pending_authorizations 0", caddyfile("auth {\n" + transparent + "\nmax_pending_authorizations 0\n}"), `max_pending_authorizations: "0" is not a positive integer`},
		{"auth local max_keys 0", caddyfile("auth {\n" + transparent + "\nlocal {\nmax_keys 0\n}\n}"), `max_keys: "0" is not a positive integer`},
		{"sandbox pool queue_size 0", caddyfile("sandbox {\npool {\nqueue_size 0\n}\n}"), "queue_size: 0 is not a count (-1: no queue; leave the option out for its default)"},
		// The pool reads a 0 fraction as "not set": scale_down 0 was 0.25.
		{"sandbox pool scale_up 0", caddyfile("sandbox {\npool {\nscale_up 0\n}\n}"), `scale_up: "0" is not a fraction above 0 (leave the option out for its default)`},
		{"sandbox pool scale_down 0", caddyfile("sandbox {\npool {\nscale_down 0.0\n}\n}"), `scale_down: "0.0" is not a fraction above 0 (leave the option out for its default; to stop idle workers only when none is busy, write a fraction below 1/max such as 0.001)`},
		{"sandbox pool max_executions 0", caddyfile("sandbox {\npool {\nmax_executions 0\n}\n}"), "max_executions: 0 is not a count (-1: never recycled; leave the option out for its default)"},

		{"json sandbox pool queue_timeout negative", jsonApp(`"sandbox":{"engine":"worker","pool":{"queue_timeout":-1000000000}}`), "pool: queue_timeout: -1s is negative"},
		{"json sandbox pool min_size negative", jsonApp(`"sandbox":{"engine":"worker","pool":{"min_size":-2}}`), "pool: min (min_size) -2 is below 0"},
		{"json sandbox pool queue_size below -1", jsonApp(`"sandbox":{"engine":"worker","pool":{"queue_size":-2}}`), "pool: queue_size -2 is below -1"},
		{"json sandbox pool spare_workers negative", jsonApp(`"sandbox":{"engine":"worker","pool":{"spare_workers":-1}}`), "pool: spare (spare_workers) -1 is below 0"},
		{"json sandbox pool session_memory_bytes negative", jsonApp(`"sandbox":{"engine":"worker","pool":{"session_memory_bytes":-1}}`), "pool: session_memory (session_memory_bytes) -1 is below 0"},
		{"json sandbox cpu_time negative", jsonApp(`"sandbox":{"engine":"inprocess","trusted_callers":true,"cpu_time":-1}`), "limits must not be negative: cpu_time is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := adaptAndLoad(t, tc.config)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("the base config fails: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestPoolErrorsNameTheCaddyfileKey: every refusal of the worker pool's
// settings names the option as the Caddyfile writes it, and the JSON key
// where that differs. The pool's own checks named its Go fields (maxSize,
// scaleInterval, maxMessageBytes), which no configuration spells, and the
// bounds checks the JSON keys only (min_size for the Caddyfile's min).
func TestPoolErrorsNameTheCaddyfileKey(t *testing.T) {
	pool := func(opts string) string {
		return "{\n\tadmin off\n\tpersist_config off\n\tcodemode {\n\t\tsandbox {\n\t\t\tpool {\n" + opts + "\n\t\t\t}\n\t\t}\n\t}\n}\n"
	}
	jsonPool := func(opts string) string {
		return `{"admin":{"disabled":true,"config":{"persist":false}},"logging":{"logs":{"default":{"level":"ERROR"}}},` +
			`"apps":{"codemode":{"sandbox":{"engine":"worker","pool":{` + opts + `}}}}}`
	}
	camel := regexp.MustCompile(`\b[a-z]+[A-Z][A-Za-z]*\b`)
	for _, tc := range []struct{ name, config, want string }{
		{"max below min", pool("min 3\nmax 2"), "pool: min 3 is above max 2"},
		{"json max_size below min_size", jsonPool(`"min_size":3,"max_size":2`), "pool: max (max_size) 2 must be at least 1 and at least min (min_size) 3"},
		{"scale_down not below scale_up", pool("scale_up 0.5\nscale_down 0.6"),
			"pool: scale_down (scale_down_threshold) 0.6 must be at least 0 and below scale_up (scale_up_threshold) 0.5"},
		{"scale_interval too short", pool("scale_interval 5ms"), "pool: scale_interval 5ms must be at least 10ms"},
		{"max_message too small", pool("max_message 1KiB"), "pool: max_message (max_message_bytes) 1024 must be between 64 KiB and 1 GiB"},
		{"max_workers below max", pool("max_workers 2"), "pool: max_workers 2 must be at least max (max_size) 4"},
		{"json max_size negative", jsonPool(`"max_size":-1`), "pool: max (max_size) -1 is below 0"},
		{"json spare_workers negative", jsonPool(`"spare_workers":-1`), "pool: spare (spare_workers) -1 is below 0"},
		{"json flood_interval negative", jsonPool(`"flood_interval":-1000000000`), "pool: flood (flood_interval): -1s is negative"},
		{"json scale_up_threshold above 1", jsonPool(`"scale_up_threshold":2`), "pool: scale_up (scale_up_threshold) 2 must be in (0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := adaptAndLoad(t, tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if m := camel.FindString(err.Error()); m != "" {
				t.Errorf("%v names %q, which no configuration spells", err, m)
			}
		})
	}
}

// adaptAndLoad loads config, a JSON config when it starts as the tests'
// JSON configs do, else a Caddyfile adapted first; the error is the
// adapter's or caddy.Load's.
func adaptAndLoad(t *testing.T, config string) error {
	t.Helper()
	cfg := []byte(config)
	if !strings.HasPrefix(config, `{"admin"`) {
		var err error
		if cfg, _, err = caddyconfig.GetAdapter("caddyfile").Adapt(cfg, nil); err != nil {
			return err
		}
	}
	return loadErr(t, cfg)
}
