package caddymodules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/codemode-gateway/caddy-codemode/broker"
)

// maxOAuthBody bounds the body of every request to the authorization
// server's endpoints (registration metadata, token and revocation forms,
// the login and consent forms); a larger one gets 413.
const maxOAuthBody = 64 << 10

// oauthRequestAcceptable refuses, before the authorization server sees them,
// requests that no endpoint may accept, with the protocol's JSON errors:
// a method other than GET/HEAD on the metadata and key set documents (405
// with Allow), a body over maxOAuthBody (413) and a body or form value that
// is not UTF-8 (400) or is declared in another charset (415). It returns
// false when it answered.
func oauthRequestAcceptable(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	if strings.HasPrefix(p, "/.well-known/") {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return true
		}
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		writeOAuthError(w, http.StatusMethodNotAllowed, "invalid_request", p+" is a document: use GET")
		return false
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	if r.ContentLength > maxOAuthBody {
		writeOAuthError(w, http.StatusRequestEntityTooLarge, "invalid_request", fmt.Sprintf("the request body exceeds %d bytes", maxOAuthBody))
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxOAuthBody+1))
	if err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "cannot read the request body")
		return false
	}
	if len(body) > maxOAuthBody {
		writeOAuthError(w, http.StatusRequestEntityTooLarge, "invalid_request", fmt.Sprintf("the request body exceeds %d bytes", maxOAuthBody))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if cs, foreign := broker.ForeignCharset(r.Header.Get("Content-Type")); foreign && mt != "application/x-www-form-urlencoded" {
		// Every endpoint reads its body as UTF-8 whatever charset it
		// names: a UTF-16 registration was misread, not refused. A form
		// is percent-encoded ASCII whatever it declares (HTTP client
		// libraries still declare ISO-8859-1 by default), and its decoded
		// values are held to UTF-8 below.
		writeOAuthError(w, http.StatusUnsupportedMediaType, oauthBodyErrorCode(p), fmt.Sprintf("charset %q is not served: the body must be UTF-8", cs))
		return false
	}
	switch {
	case !utf8.Valid(body):
	case mt == "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return true // the endpoint answers a malformed form itself
		}
		for k, vs := range form {
			ok := utf8.ValidString(k)
			for _, v := range vs {
				ok = ok && utf8.ValidString(v)
			}
			if !ok {
				writeOAuthError(w, http.StatusBadRequest, "invalid_request", "form values must be UTF-8")
				return false
			}
		}
		return true
	default:
		return true
	}
	writeOAuthError(w, http.StatusBadRequest, oauthBodyErrorCode(p), "the request body must be UTF-8")
	return false
}

// oauthBodyErrorCode is the OAuth error code for a body an endpoint cannot
// read: registration has its own (RFC 7591 section 3.2.2).
func oauthBodyErrorCode(path string) string {
	if strings.HasSuffix(path, "/register") {
		return "invalid_client_metadata"
	}
	return "invalid_request"
}

func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}
