package search

import (
	"strings"
	"unicode"
)

// A request often comes wrapped in words addressed to whoever reads it, not
// about the tool it wants: "How do I close an issue?", "I need to close an
// issue", "Which endpoint should I call to close an issue?", "Can you close
// this issue", "Tool to close an issue". The ranking keys on a request's
// opening verb, its question word and its first preposition, so the wrapper
// decides them: "How do I …" reads as a question, "Which endpoint …" asks
// for endpoints. requestOf drops such a wrapper, and an "… using the API"
// tail, and ranks the request inside.

// request is what the ranking reads of query: without the apps it names as
// where it happens (returned) and without a wrapper around it.
func (ix *BM25) request(query string) (string, map[string]bool) {
	query, apps := ix.withoutApps(query)
	return requestOf(query), apps
}

// framingWords are the words a wrapper is made of: function words,
// pronouns, and the words for asking and for an API's parts.
var framingWords = map[string]bool{
	"how": true, "do": true, "does": true, "can": true, "could": true, "would": true, "should": true,
	"will": true, "may": true, "might": true, "shall": true, "i": true, "we": true, "you": true, "me": true, "us": true, "one": true,
	"d": true, "m": true, "s": true, "need": true, "needs": true, "want": true, "wants": true,
	"like": true, "is": true, "are": true, "am": true, "there": true, "a": true, "an": true, "the": true,
	"way": true, "best": true, "right": true, "what": true, "which": true, "endpoint": true,
	"endpoints": true, "api": true, "apis": true, "operation": true, "operations": true, "tool": true,
	"tools": true, "method": true, "methods": true, "call": true, "function": true, "use": true,
	"find": true, "help": true, "please": true, "looking": true, "for": true, "lets": true, "let": true,
	"allows": true, "allow": true, "that": true, "in": true, "order": true, "to": true, "able": true,
	"be": true, "trying": true, "try": true, "kindly": true, "just": true, "so": true,
}

// framingCues are the words that make a run of framingWords a wrapper: a
// question about how, a need, a plea, the assistant addressed, an API's
// parts named. "do I have …" and "can I delete …" have none: they ask
// about the caller.
var framingCues = map[string]bool{
	"how": true, "need": true, "needs": true, "want": true, "wants": true, "like": true, "please": true,
	"help": true, "you": true, "way": true, "endpoint": true, "endpoints": true, "api": true, "apis": true,
	"operation": true, "operations": true, "tool": true, "tools": true, "method": true, "methods": true,
	"function": true, "trying": true, "able": true, "kindly": true, "lets": true, "allows": true,
}

// framingEnds are the words a wrapper ends with, right before the request's
// verb: "… to", "help me", "how do I", "can you", "please".
var framingEnds = map[string]bool{"to": true, "me": true, "us": true, "i": true, "we": true, "you": true, "please": true, "kindly": true, "one": true}

// apiParts are the words for an API's parts; modals end a wrapper that
// names one.
var (
	apiParts = map[string]bool{"endpoint": true, "endpoints": true, "api": true, "apis": true, "operation": true,
		"operations": true, "tool": true, "tools": true, "method": true, "methods": true, "function": true, "call": true}
	modals = map[string]bool{"can": true, "could": true, "would": true, "will": true, "should": true, "may": true,
		"might": true, "shall": true}
)

// apiTail are the last words of a tail that names the API itself ("… using
// the API", "… via the REST API", "… with the endpoint").
var apiTail = map[string]bool{"api": true, "endpoint": true, "rest": true, "sdk": true}

// requestOf returns query without a wrapper around the request (see
// above). The request must keep at least two words.
func requestOf(query string) string {
	words := strings.Fields(query)
	if len(words) < 3 || !framingWords[firstWord(words[0])] && !apiTail[firstWord(words[len(words)-1])] {
		return query // the common case, without allocations
	}
	toks := tokenizeWords(words)
	// The longest run of framing words from the start that holds a cue and
	// ends right before a verb.
	cut, cue, part := 0, false, false
	for i := 0; i < len(words)-2; i++ {
		ok := len(toks[i]) > 0
		for _, t := range toks[i] {
			ok = ok && framingWords[t]
			cue = cue || framingCues[t]
			part = part || apiParts[t]
		}
		if !ok {
			break
		}
		// A modal ends a wrapper that names an API's part: "Which endpoint
		// can …", "What tool would …" (not "can I delete …").
		if last := toks[i][len(toks[i])-1]; cue && (framingEnds[last] || part && modals[last]) && startsVerb(toks[i+1]) {
			cut = i + 1
		}
	}
	words, toks = words[cut:], toks[cut:]
	// An API-naming tail: "using the API", "via the REST API".
	one := func(i int) string { return single(toks, i) }
	if n := len(words); n >= 4 && apiTail[one(n-1)] {
		j := n - 2
		for j > 0 && (apiTail[one(j)] || one(j) == "the" || one(j) == "a" || one(j) == "an") {
			j--
		}
		if j >= 2 && tailPrepositions[one(j)] {
			words = words[:j]
		}
	}
	return strings.Join(words, " ")
}

// tailPrepositions open an API-naming tail.
var tailPrepositions = map[string]bool{"using": true, "via": true, "through": true, "with": true, "from": true, "in": true, "by": true}

// startsVerb reports whether a word (its tokens) can open a request: a verb
// WordNet knows, an intent word, or a word WordNet does not know ("upvote").
func startsVerb(toks []string) bool {
	if len(toks) == 0 {
		return false
	}
	t := toks[0]
	if stopwords[t] && !framingEnds[t] || questionWords[t] {
		return false
	}
	if intentWords[t] != IntentNone {
		return true
	}
	for _, l := range Lemmas(t) {
		if isVerb(l) {
			return true
		}
	}
	_, known := lex().pos[Lemmas(t)[0]]
	return !known
}

// appPrepositions place a request in an app: "in GitHub", "on Slack", "via
// Twilio", "using the Jira API", "for SendGrid".
var appPrepositions = map[string]bool{"in": true, "on": true, "for": true, "from": true, "using": true, "via": true, "with": true, "through": true, "at": true, "inside": true, "within": true}

// withoutApps returns query without the words that name one of the index's
// apps as where the request happens — "In Jira, …", "GitHub: …", "… in
// SendGrid", "using the Twilio API" — and the apps so named. Every tool of
// an app has its id among its words, so the mention adds nothing to a
// tool's score, but it decided the request's shape: its first word, its
// first preposition (the modifier). An app named inside the request ("a
// GitHub issue") stays. Over several apps, the tools of an app not named
// are demoted (otherAppFactor).
func (ix *BM25) withoutApps(query string) (string, map[string]bool) {
	if len(ix.appSet) == 0 || !ix.mayNameApp(query) {
		return query, nil
	}
	words := strings.Fields(query)
	toks := tokenizeWords(words)
	// app reports the app whose words start at word i and the number of
	// words they take (up to three: "Google Calendar API").
	app := func(i int) (string, int) {
		var parts []string
		for n := 1; n <= 3 && i+n <= len(words); n++ {
			parts = append(parts, toks[i+n-1]...)
			if k := strings.Join(parts, ""); ix.appSet[k] {
				return k, n
			}
		}
		return "", 0
	}
	one := func(i int) string { return single(toks, i) }
	drop := make([]bool, len(words))
	var named map[string]bool
	for i := 0; i < len(words); i++ {
		a, n := app(i)
		if n == 0 {
			continue
		}
		// Where the mention starts: a preposition, maybe "the", before it;
		// or the request's first word.
		start := i
		if one(start-1) == "the" {
			start--
		}
		switch {
		case appPrepositions[one(start-1)]:
			start--
		case start == 0:
		default:
			continue
		}
		end := i + n
		for apiTail[one(end)] || one(end) == "apis" || one(end) == "account" {
			end++
		}
		for j := start; j < end; j++ {
			drop[j] = true
		}
		if named == nil {
			named = map[string]bool{}
		}
		named[a] = true
		i = end - 1
	}
	if named == nil {
		return query, nil
	}
	var out []string
	for i, w := range words {
		// Words of no letter or digit left at the start ("GitHub - …").
		if !drop[i] && (len(toks[i]) > 0 || len(out) > 0) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return query, nil
	}
	return strings.Join(out, " "), named
}

// tokenizeWords is the tokens of each word.
func tokenizeWords(words []string) [][]string {
	toks := make([][]string, len(words))
	for i, w := range words {
		toks[i] = Tokenize(w)
	}
	return toks
}

// single is the one token of word i, or "" when i is out of range or the
// word has none or several.
func single(toks [][]string, i int) string {
	if i < 0 || i >= len(toks) || len(toks[i]) != 1 {
		return ""
	}
	return toks[i][0]
}

// firstWord is the first word of w lowercased, without punctuation around
// it ("How" -> how, "API?" -> api).
func firstWord(w string) string {
	if t := Tokenize(w); len(t) > 0 {
		return t[0]
	}
	return ""
}

// mayNameApp reports whether query's letters and digits, lowercased and run
// together, hold one of the index's app ids: a cheap test before
// withoutApps looks at words.
func (ix *BM25) mayNameApp(query string) bool {
	var b strings.Builder
	b.Grow(len(query))
	for _, r := range strings.ToLower(query) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	run := b.String()
	for app := range ix.appSet {
		if strings.Contains(run, app) {
			return true
		}
	}
	return false
}
