package caddymodules

import (
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/metatools/search"
)

func init() {
	caddy.RegisterModule(SearchTFIDF{})
	caddy.RegisterModule(SearchEmbeddings{})
	caddy.RegisterModule(SearchHybrid{})
}

// SearchStrategy is a `codemode.search.*` module: how meta:search ranks
// tools (the meta block's `search`, named by its "strategy" key; tfidf by
// default).
type SearchStrategy interface {
	Strategy() search.Strategy
}

// Search strategy module names.
const (
	SearchStrategyTFIDF      = "tfidf"
	SearchStrategyEmbeddings = "embeddings"
	SearchStrategyHybrid     = "hybrid"
)

// SearchTFIDF ranks with BM25F over names, descriptions and parameters,
// with stemming and intent synonyms: offline, no model. The default.
type SearchTFIDF struct{}

// CaddyModule returns the Caddy module information.
func (SearchTFIDF) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.search.tfidf",
		New: func() caddy.Module { return new(SearchTFIDF) },
	}
}

// Strategy implements SearchStrategy.
func (SearchTFIDF) Strategy() search.Strategy { return search.BM25Strategy{} }

// UnmarshalCaddyfile reads `tfidf`, which takes no options.
func (*SearchTFIDF) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() || d.NextBlock(0) {
		return d.Err("search tfidf takes no options")
	}
	return nil
}

// SearchEmbeddings ranks by cosine similarity of embeddings from an
// OpenAI-compatible endpoint (the spec's "ml" strategy). The vectors of
// unchanged tools are kept across config reloads that leave this block
// unchanged.
type SearchEmbeddings struct {
	// URL is the embeddings endpoint, e.g.
	// http://127.0.0.1:11434/v1/embeddings ("/embeddings" is appended when
	// missing). Required. Placeholders such as {env.EMBEDDINGS_URL} are
	// replaced.
	URL string `json:"url,omitempty"`
	// Model is the embedding model name. Required.
	Model string `json:"model,omitempty"`
	// APIKey is sent as a bearer token; use a placeholder such as
	// {env.OPENAI_API_KEY}. Default none. Never logged.
	APIKey string `json:"api_key,omitempty"`
	// Timeout bounds one embeddings request. Default 30s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	strategy search.Strategy
	key      string
	hybrid   bool // SearchHybrid
}

// DefaultEmbeddingsTimeout bounds an embeddings request.
const DefaultEmbeddingsTimeout = 30 * time.Second

// CaddyModule returns the Caddy module information.
func (SearchEmbeddings) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.search.embeddings",
		New: func() caddy.Module { return new(SearchEmbeddings) },
	}
}

// Provision acquires the strategy, a component keyed by these settings.
func (e *SearchEmbeddings) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	e.URL, e.APIKey = repl.ReplaceAll(e.URL, ""), repl.ReplaceAll(e.APIKey, "")
	if e.Timeout == 0 {
		e.Timeout = caddy.Duration(DefaultEmbeddingsTimeout)
	}
	if err := e.Validate(); err != nil {
		return err
	}
	name := SearchStrategyEmbeddings
	if e.hybrid {
		name = SearchStrategyHybrid
	}
	key, err := componentKey("search", struct {
		Strategy string
		SearchEmbeddings
	}{name, *e})
	if err != nil {
		return err
	}
	logger := ctx.Logger()
	s, err := acquire(key, func() (search.Strategy, func() error, error) {
		client := &search.EmbeddingClient{URL: e.URL, Model: e.Model, APIKey: e.APIKey,
			HTTPClient: &http.Client{Timeout: time.Duration(e.Timeout)}}
		if e.hybrid {
			s, err := search.NewHybridStrategy(client, func(err error) {
				logger.Warn("embeddings failed; hybrid search answered with tfidf alone", zap.Error(err))
			})
			return s, nil, err
		}
		s, err := search.NewEmbeddingStrategy(client)
		return s, nil, err
	})
	if err != nil {
		return fmt.Errorf("codemode.search.%s: %w", name, err)
	}
	e.strategy, e.key = s, key
	return nil
}

// Validate checks the settings.
func (e *SearchEmbeddings) Validate() error {
	if e.URL == "" || e.Model == "" {
		return fmt.Errorf("codemode.search.embeddings: url and model are required")
	}
	if e.Timeout < 0 {
		return fmt.Errorf("codemode.search.embeddings: timeout must not be negative")
	}
	return nil
}

// Cleanup releases the strategy.
func (e *SearchEmbeddings) Cleanup() error {
	key := e.key
	e.key, e.strategy = "", nil
	return release(key)
}

// Strategy implements SearchStrategy.
func (e *SearchEmbeddings) Strategy() search.Strategy { return e.strategy }

// UnmarshalCaddyfile reads the embeddings strategy. Syntax:
//
//	embeddings {
//		url     <endpoint>        # required
//		model   <name>            # required
//		api_key <key>
//		timeout <duration>        # default 30s
//	}
func (e *SearchEmbeddings) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := blockOptions{}
	for d.NextBlock(0) {
		if err := seen.once(d); err != nil {
			return err
		}
		if err := e.unmarshalOption(d); err != nil {
			return err
		}
	}
	if e.URL == "" || e.Model == "" {
		return d.Errf("search %s needs url and model", d.Val())
	}
	return nil
}

// unmarshalOption reads one option of the block (shared with the former
// `embedding` block of meta).
func (e *SearchEmbeddings) unmarshalOption(d *caddyfile.Dispenser) error {
	switch d.Val() {
	case "url":
		return oneArg(d, &e.URL)
	case "model":
		return oneArg(d, &e.Model)
	case "api_key":
		return oneArg(d, &e.APIKey)
	case "timeout":
		return parseDurationArg(d, &e.Timeout)
	}
	return d.Errf("unrecognized subdirective %q", d.Val())
}

// SearchHybrid fuses the tfidf and embeddings rankings by reciprocal rank
// fusion; while the embeddings endpoint fails it answers from tfidf alone
// (and logs a warning). Its fields are those of SearchEmbeddings.
type SearchHybrid struct {
	SearchEmbeddings
}

// CaddyModule returns the Caddy module information.
func (SearchHybrid) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.search.hybrid",
		New: func() caddy.Module { return &SearchHybrid{SearchEmbeddings{hybrid: true}} },
	}
}

// Interface guards
var (
	_ SearchStrategy        = SearchTFIDF{}
	_ SearchStrategy        = (*SearchEmbeddings)(nil)
	_ caddy.Provisioner     = (*SearchEmbeddings)(nil)
	_ caddy.Validator       = (*SearchEmbeddings)(nil)
	_ caddy.CleanerUpper    = (*SearchEmbeddings)(nil)
	_ caddyfile.Unmarshaler = (*SearchEmbeddings)(nil)
	_ caddyfile.Unmarshaler = (*SearchTFIDF)(nil)
)
