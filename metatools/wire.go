package metatools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// What an MCP client receives of a meta-tool's answer, and what a model
// pays for it. docs/metatools.md, "What a client receives".

// encodeJSON is json.Marshal without HTML escaping, which writes each "<",
// ">" and "&" as six bytes (\u003c): an HTML or XML answer grew six times.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// unescapedResult is a tools/call result written as the go-sdk writes it,
// less the HTML escaping its encoding adds: CallToolResult.MarshalJSON and
// TextContent.MarshalJSON use json.Marshal, so the go-sdk's JSON-RPC
// encoder, which leaves HTML alone, received "<" already as \u003c. The
// embedded result keeps the methods the go-sdk calls on a result after the
// server's middleware (its _meta, its result type).
type unescapedResult struct{ *mcp.CallToolResult }

func (r unescapedResult) MarshalJSON() ([]byte, error) {
	b, err := r.CallToolResult.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return htmlUnescape(b), nil
}

// htmlUnescape rewrites, in place, each \u003c, \u003e and \u0026 escape of
// the JSON text b as the character it stands for, and returns b shortened.
// In JSON a backslash is found only in a string and always starts an
// escape, so b is read escape by escape: an escaped backslash followed by
// "u003c" is a backslash and text, and stays. U+2028 and U+2029, which
// encoding/json escapes whatever its HTML setting, stay escaped.
func htmlUnescape(b []byte) []byte {
	r := bytes.IndexByte(b, '\\')
	if r < 0 {
		return b
	}
	w := r
	for r < len(b) {
		if b[r] != '\\' {
			i := bytes.IndexByte(b[r:], '\\')
			if i < 0 {
				i = len(b) - r
			}
			if w != r {
				copy(b[w:], b[r:r+i])
			}
			w += i
			r += i
			continue
		}
		if c := htmlEscaped(b[r:]); c != 0 {
			b[w] = c
			w++
			r += 6
			continue
		}
		w += copy(b[w:], b[r:min(r+2, len(b))]) // any other escape's first two bytes
		r += 2
	}
	return b[:w]
}

// htmlEscaped is the character b starts with the escape of when it is "<",
// ">" or "&"; 0 otherwise.
func htmlEscaped(b []byte) byte {
	if len(b) < 6 || b[1] != 'u' || b[2] != '0' || b[3] != '0' {
		return 0
	}
	switch string(b[4:6]) {
	case "3c", "3C":
		return '<'
	case "3e", "3E":
		return '>'
	case "26":
		return '&'
	}
	return 0
}

// wireSizes are the sizes of the compact JSON text raw in a tools/call
// result as a client receives it (unescapedResult), in one pass: as
// structuredContent (raw itself, U+2028 and U+2029 escaped to six bytes)
// and as a text content, the JSON string of raw (quotes, backslashes and
// \b \f \n \r \t take two bytes, other control characters six, U+2028 and
// U+2029 six for their three, each invalid UTF-8 byte six: \ufffd).
func wireSizes(raw []byte) (structured, text int) {
	if !utf8.Valid(raw) {
		return wireSizesDecoded(raw)
	}
	structured, text = len(raw), 2
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < utf8.RuneSelf {
			text += int(quotedASCII[c])
			continue
		}
		// Valid UTF-8: a character is written as is but U+2028 and
		// U+2029 (E2 80 A8, E2 80 A9); its lead byte gives its length.
		if c == 0xE2 && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8 {
			structured += 3
			text += 6
			i += 2
			continue
		}
		size := 2
		if c >= 0xF0 {
			size = 4
		} else if c >= 0xE0 {
			size = 3
		}
		text += size
		i += size - 1
	}
	return structured, text
}

// wireSizesDecoded is wireSizes of text that is not valid UTF-8, character
// by character.
func wireSizesDecoded(raw []byte) (structured, text int) {
	structured, text = len(raw), 2
	for i := 0; i < len(raw); {
		if c := raw[i]; c < utf8.RuneSelf {
			text += int(quotedASCII[c])
			i++
			continue
		}
		r, size := utf8.DecodeRune(raw[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			text += 6
		case r == '\u2028' || r == '\u2029':
			structured += 3
			text += 6
		default:
			text += size
		}
		i += size
	}
	return structured, text
}

// quotedASCII is the size of each ASCII character in a JSON string as
// encoding/json writes it.
var quotedASCII = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			t[c] = 2
		case c < 0x20:
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()

// answerOverBound holds the answer res of meta:execute or meta:invoke to
// the result bound (resultBound) as a client receives it. It returns the
// size of the answer's first copy (structuredContent, or the text when
// there is none) when that is over the bound, for the caller to refuse the
// answer with; 0 when within or when there is no bound. A text copy of
// structuredContent over the bound is replaced by a note pointing to
// structuredContent: MCP's tools page says a tool returning structured
// content SHOULD also return it as JSON text, and every answer within the
// bound as text keeps it. res's text copy is its structuredContent's JSON,
// as both meta-tools write it. An answer is so at most twice the bound.
func (s *Service) answerOverBound(res *mcp.CallToolResult, status sandbox.Status) (size, bound int) {
	bound = s.resultBound()
	if bound <= 0 {
		return 0, bound
	}
	raw, ok := res.StructuredContent.(json.RawMessage)
	if !ok {
		n := 0
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				// No copy: the compiler sees that wireSizes keeps and
				// writes nothing of it (0 B/op in BenchmarkInvokeTextAnswer).
				_, size := wireSizes([]byte(tc.Text))
				n += size
			}
		}
		if n > bound {
			return n, bound
		}
		return 0, bound
	}
	structured, text := wireSizes(raw)
	if text > bound {
		res.Content = []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			`{"status":%q,"note":"the result is in structuredContent only: as JSON text here it would be %d bytes, more than the result bound of %d bytes"}`,
			status, text, bound)}}
	}
	if structured > bound {
		return structured, bound
	}
	return 0, bound
}
