package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// sourceState is one source and what its last good fetch produced.
type sourceState struct {
	src        Source
	displayURL string
	specURL    *url.URL // http(s) only; nil for files
	filePath   string   // files only
	baseURL    *url.URL // parsed Source.BaseURL, or nil

	mu sync.Mutex
	st sourceSnapshot
	// conditional-request and change-detection state of the last good fetch
	etag, lastModified string
	rawHash            [sha256.Size]byte
}

// sourceSnapshot is what buildSnapshot reads from a source.
type sourceSnapshot struct {
	ops         []*operation // sorted by name
	specHash    string       // hash of the sorted action names: drives the version
	contentHash string       // hash of everything an action exposes: drives OnChange
	lastSuccess time.Time
	lastError   string
}

func newSourceState(src Source) (*sourceState, error) {
	if src.SpecURL == "" {
		return nil, errors.New("spec URL is required")
	}
	if src.Timeout <= 0 {
		src.Timeout = DefaultTimeout
	}
	if src.MaxResponseBytes <= 0 {
		src.MaxResponseBytes = DefaultMaxResponseBytes
	}
	for k := range src.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return nil, fmt.Errorf("invalid header name %q", k)
		}
	}
	s := &sourceState{src: src, displayURL: redactURL(src.SpecURL)}
	u, err := url.Parse(src.SpecURL)
	switch {
	case err == nil && (u.Scheme == "http" || u.Scheme == "https"):
		if u.Host == "" {
			return nil, fmt.Errorf("spec URL %q has no host", s.displayURL)
		}
		s.specURL = u
	case err == nil && u.Scheme == "file":
		p := u.Path
		if u.Opaque != "" { // file:relative/path
			p = u.Opaque
		}
		s.filePath = filepath.FromSlash(p)
	case err == nil && len(u.Scheme) > 1: // one letter is a Windows drive
		return nil, fmt.Errorf("spec URL %q: scheme %q is not http, https or file", s.displayURL, u.Scheme)
	default:
		s.filePath = src.SpecURL
	}
	if src.BaseURL != "" {
		b, err := url.Parse(src.BaseURL)
		if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
			return nil, fmt.Errorf("base URL %q must be an absolute http(s) URL", src.BaseURL)
		}
		s.baseURL = b
	}
	return s, nil
}

// LocalFile returns the path of the local file a spec URL names (a file:
// URL or a plain path, relative to the working directory), or "" for an
// http(s) URL or a spec URL New refuses. A file source that does not exist
// yet is no error for New (Start reports it and retries it); a caller that
// wants it at hand when it starts, as the Caddy config load does, checks
// the path itself.
func LocalFile(specURL string) string {
	s, err := newSourceState(Source{SpecURL: specURL})
	if err != nil {
		return ""
	}
	return s.filePath
}

func (s *sourceState) state() sourceSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *sourceState) loaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.st.lastSuccess.IsZero()
}

func (s *sourceState) actionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.st.ops)
}

func (s *sourceState) setError(err error) {
	s.mu.Lock()
	s.st.lastError = err.Error()
	s.mu.Unlock()
}

func (s *sourceState) setSuccess(t time.Time) {
	s.mu.Lock()
	s.st.lastSuccess = t
	s.st.lastError = ""
	s.mu.Unlock()
}

// fetchAndParse reads the document and, when its bytes changed since the last
// good fetch, parses it and replaces the source's operations. An unchanged
// document (HTTP 304 or the same bytes) keeps them as they are.
func (c *Catalog) fetchAndParse(ctx context.Context, s *sourceState) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.FetchTimeout)
	defer cancel()

	var (
		data               []byte
		etag, lastModified string
		err                error
	)
	if s.specURL != nil {
		var notModified bool
		data, etag, lastModified, notModified, err = c.fetchHTTP(ctx, s)
		if err != nil {
			return err
		}
		if notModified {
			return nil
		}
	} else {
		data, err = readFileCapped(s.filePath, c.opts.MaxSpecBytes)
		if err != nil {
			return err
		}
	}
	sum := sha256.Sum256(data)
	s.mu.Lock()
	same := sum == s.rawHash && !s.st.lastSuccess.IsZero()
	s.mu.Unlock()
	if same {
		return nil
	}

	ops, err := buildOperations(s, data)
	if err != nil {
		return err
	}
	specHash, contentHash := hashOperations(ops)
	s.mu.Lock()
	s.st.ops = ops
	s.st.specHash = specHash
	s.st.contentHash = contentHash
	s.rawHash = sum
	s.etag, s.lastModified = etag, lastModified
	s.mu.Unlock()
	return nil
}

// fetchHTTP GETs the document, conditionally when the last good fetch gave an
// ETag or Last-Modified.
func (c *Catalog) fetchHTTP(ctx context.Context, s *sourceState) (data []byte, etag, lastModified string, notModified bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.specURL.String(), nil)
	if err != nil {
		return nil, "", "", false, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	for k, v := range s.src.SpecHeaders {
		req.Header.Set(k, v)
	}
	s.mu.Lock()
	if !s.st.lastSuccess.IsZero() {
		if s.etag != "" {
			req.Header.Set("If-None-Match", s.etag)
		}
		if s.lastModified != "" {
			req.Header.Set("If-Modified-Since", s.lastModified)
		}
	}
	s.mu.Unlock()

	client := c.client
	if len(s.src.SpecHeaders) > 0 {
		client = c.callerCli // credentials stay on the document's host
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", "", false, fmt.Errorf("fetching document: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, "", "", true, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, "", "", false, fmt.Errorf("fetching document: status %s", resp.Status)
	}
	data, err = readCapped(resp.Body, c.opts.MaxSpecBytes)
	if err != nil {
		return nil, "", "", false, fmt.Errorf("reading document: %w", err)
	}
	return data, resp.Header.Get("ETag"), resp.Header.Get("Last-Modified"), false, nil
}

var errTooLarge = errors.New("too large")

// readCapped reads r whole, failing with errTooLarge past max bytes.
func readCapped(r io.Reader, max int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, max)
	}
	return buf.Bytes(), nil
}

func readFileCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading document: %w", err)
	}
	defer f.Close()
	data, err := readCapped(f, max)
	if err != nil {
		return nil, fmt.Errorf("reading document %s: %w", path, err)
	}
	return data, nil
}

// hashOperations returns the spec hash (sorted action names only) and the
// content hash (names, schemas, descriptions, annotations...) of a source.
func hashOperations(ops []*operation) (specHash, contentHash string) {
	names := sha256.New()
	content := sha256.New()
	for _, op := range ops { // ops are sorted by name
		names.Write([]byte(op.action.Name))
		names.Write([]byte{'\n'})
		a := op.action
		fmt.Fprintf(content, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%q\x00%v\x00%s\x00%s\x00%+v\x00%s\n",
			a.Name, a.Description, a.Summary, a.InputSchema, a.OutputSchema, a.Method+" "+a.Path,
			a.Tags, a.Deprecated, a.OperationID, op.baseURL, a.Annotations, op.baseErr)
	}
	if len(ops) == 0 {
		// No actions hashes like a source not loaded yet: the version moves
		// only when actions come or go.
		return "", hex.EncodeToString(content.Sum(nil))
	}
	return hex.EncodeToString(names.Sum(nil)), hex.EncodeToString(content.Sum(nil))
}
