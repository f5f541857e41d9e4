package search

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
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
	return requestOf(ix.joinHyphenated(query)), apps
}

// hyphenatedRe is two words joined by a hyphen ("add-on", "sign-up").
var hyphenatedRe = regexp.MustCompile(`\b([A-Za-z]+)-([A-Za-z]+)\b`)

// joinHyphenated writes as one word a hyphenated pair the catalog writes
// so ("add-ons": addons, where "add" would read as the verb and "ons" as
// a word of its own).
func (ix *BM25) joinHyphenated(query string) string {
	if !strings.Contains(query, "-") {
		return query
	}
	return hyphenatedRe.ReplaceAllStringFunc(query, func(m string) string {
		joined := strings.ReplaceAll(m, "-", "")
		for _, l := range Lemmas(strings.ToLower(joined)) {
			if _, ok := ix.idf[l]; ok {
				return joined
			}
		}
		return m
	})
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
	"be": true, "trying": true, "try": true, "kindly": true, "just": true, "so": true, "of": true,
	"it": true, "possible": true, "any": true, "some": true,
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
	"possible": true,
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
// above): a leading label ("Quick question: …", "Hey, …"), a leading run
// of framing words, and the tails that address the reader rather than name
// the request ("… using the API", "… and return the result", "… as JSON",
// "… for me", "…, thanks"). The request must keep at least two words.
func requestOf(query string) string {
	words := strings.Fields(query)
	if len(words) >= 3 && hasValue(words) {
		words = withoutValues(words)
		query = strings.Join(words, " ")
	}
	if len(words) < 3 || !mayBeFramed(words) && !mayGiveReason(words) {
		return query // the common case, without allocations
	}
	toks := tokenizeWords(words)
	for range 2 { // "Quick question: Task: …"
		words, toks = withoutLabel(words, toks)
	}
	// The longest run of framing words from the start that holds a cue and
	// ends right before a verb.
	cut, cue, part, base := 0, false, false, ""
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
		last := toks[i][len(toks[i])-1]
		if cue && (framingEnds[last] || part && modals[last]) && startsVerb(toks[i+1]) {
			cut, base = i+1, ""
		}
		// So does the verb a named part does: "Which endpoint lists pods?",
		// "the API call that deletes a user" (the verb becomes the
		// request's own: "list pods?"). Not "which API groups does the
		// server support", whose "groups" a verb-like word follows.
		if part && (apiParts[last] || last == "that" || last == "which") {
			if v := thirdPerson(toks[i+1]); v != "" && !auxiliary(single(toks, i+2)) {
				cut, base = i+1, v
			}
		}
	}
	words, toks = words[cut:], toks[cut:]
	if base != "" {
		words = append([]string{base}, words[1:]...)
		toks = append([][]string{{base}}, toks[1:]...)
	}
	words, toks = withoutReason(words, toks)
	return strings.Join(withoutTails(words, toks), " ")
}

// A request may end by saying why it is made: "… so I can review it", "…
// so that the team knows", "… because the customer asked", "… since we are
// migrating", "… in order to free up space", "… to see what changed", "…
// to make sure nothing is missing". The reason names no tool, but its verbs
// and nouns met tools that have them (on the tuning catalogs such a tail
// cost 0.01 to 0.13 of MRR). withoutReason drops it: from "so that", "so"
// before a subject, "because", "since" before a personal pronoun ("since last
// week", "since my last sync" are the request's own), "in order to", or "to" before a verb of finding
// out followed by what is to be found out ("to see what", "to check if",
// "to find out whether", "to make sure"). The request keeps at least two
// words.

// reasonSubjects are the subjects of a reason clause after "so" or "since".
var reasonSubjects = map[string]bool{"i": true, "we": true, "you": true, "they": true, "he": true, "she": true,
	"it": true, "that": true, "the": true, "our": true, "my": true, "everyone": true, "someone": true}

// sinceSubjects open a reason after "since"; any other word may open a
// time ("since my last sync", "since the release", "since it was created").
var sinceSubjects = map[string]bool{"i": true, "we": true, "you": true, "they": true, "he": true, "she": true}

// findOutVerbs are the verbs of a "to see what …" purpose; findOutObjects
// what follows them.
var (
	findOutVerbs = map[string]bool{"see": true, "check": true, "find": true, "know": true, "verify": true,
		"confirm": true, "understand": true, "learn": true, "figure": true, "make": true, "determine": true, "tell": true}
	findOutObjects = map[string]bool{"what": true, "whether": true, "if": true, "which": true, "who": true,
		"how": true, "when": true, "where": true, "why": true, "out": true, "sure": true}
)

// mayGiveReason reports whether words may end with a reason (see
// withoutReason): a cheap test before it.
func mayGiveReason(words []string) bool {
	for _, w := range words[2:] {
		switch strings.ToLower(strings.Trim(w, ",;.")) {
		case "so", "because", "since", "order", "to":
			return true
		}
	}
	return false
}

// withoutReason returns words without a trailing reason (see above).
func withoutReason(words []string, toks [][]string) ([]string, [][]string) {
	one := func(i int) string { return single(toks, i) }
	for i := 2; i < len(words)-1; i++ {
		cut := false
		switch one(i) {
		case "so":
			cut = reasonSubjects[one(i+1)]
		case "because":
			cut = true
		case "since":
			cut = sinceSubjects[one(i+1)]
		case "in":
			cut = one(i+1) == "order" && (one(i+2) == "to" || one(i+2) == "that")
		case "to":
			cut = findOutVerbs[one(i+1)] && findOutObjects[one(i+2)]
		}
		if cut {
			return words[:i], toks[:i]
		}
	}
	return words, toks
}

// A request often carries the values of the call it asks for: a name in
// quotes, an identifier, what a thing is called ("create a project named
// Apollo", "get the pod nginx-7d9f4 (id 12345)", "find tasks whose name
// contains 'invoice'"). They name no tool, but their words met tools that
// happen to have them. withoutValues drops them: a quoted run, a word that
// mixes digits with letters and punctuation or holds three digits, the value
// of a key=value word, an identifier's label with its value ("id 12345",
// "id=42"), and a name given with named, called or titled. The request
// keeps at least two words.

// quotes open or close a quoted value.
const quotes = "\"'`“”‘’«»"

// hasValue reports whether words may hold a value: a cheap test before
// withoutValues.
func hasValue(words []string) bool {
	for _, w := range words {
		if strings.ContainsAny(w, quotes+"0123456789=@/") || nameVerbs[strings.ToLower(w)] || hostName(w) {
			return true
		}
	}
	return false
}

// nameVerbs introduce what a thing is called.
var nameVerbs = map[string]bool{"named": true, "called": true, "titled": true, "labelled": true, "labeled": true}

// withoutValues returns words without the values they carry (see above).
func withoutValues(words []string) []string {
	out := make([]string, 0, len(words))
	quoted := rune(0)
	for i := 0; i < len(words); i++ {
		w := words[i]
		if quoted != 0 {
			if strings.ContainsRune(w, quoted) || strings.ContainsAny(w, "”’»") {
				quoted = 0
			}
			continue
		}
		if r, size := utf8.DecodeRuneInString(w); strings.ContainsRune(quotes, r) {
			if !strings.ContainsRune(w[size:], closingQuote(r)) {
				quoted = closingQuote(r)
			}
			continue
		}
		if nameVerbs[strings.ToLower(w)] && i+1 < len(words) {
			// "named Apollo", "called \"prod-web-1\"": the name and the word
			// that gives it.
			next := words[i+1]
			if r, _ := utf8.DecodeRuneInString(next); !stopwords[strings.ToLower(next)] && !strings.ContainsRune(quotes, r) {
				i++
			}
			continue
		}
		if k, _, ok := strings.Cut(w, "="); ok {
			if k != "" && !idWords[firstWord(k)] {
				out = append(out, k)
			}
			continue
		}
		if isValue(w) {
			// "(id 12345)", "ID abc-123": the label goes with its value.
			if n := len(out); n > 0 && idWords[firstWord(out[n-1])] {
				out = out[:n-1]
			}
			continue
		}
		out = append(out, w)
	}
	if len(out) < 2 {
		return words
	}
	return out
}

// closingQuote is the quote that closes a value r opens.
func closingQuote(r rune) rune {
	switch r {
	case '“':
		return '”'
	case '‘':
		return '’'
	case '«':
		return '»'
	}
	return r
}

// isValue reports whether w is an identifier rather than a word: digits
// mixed with letters and a hyphen, underscore or dot ("nginx-7d9f4",
// "abc-123", "v1.2.3"), three digits or more ("12345", "#1234"), an email
// address or a URL.
func isValue(w string) bool {
	digits, letters, punct := 0, 0, false
	for _, r := range w {
		switch {
		case unicode.IsDigit(r):
			digits++
		case unicode.IsLetter(r):
			letters++
		case r == '-' || r == '_' || r == '.':
			punct = true
		}
	}
	if strings.Contains(w, "@") && strings.Contains(w, ".") || strings.Contains(w, "://") {
		return true // an email address, a URL
	}
	if hostName(w) {
		return true
	}
	return digits >= 3 || digits > 0 && punct && letters+digits > 2
}

// mayBeFramed reports whether words can hold a wrapper, a label or a tail:
// a cheap test before requestOf tokenizes them.
func mayBeFramed(words []string) bool {
	if framingWords[firstWord(words[0])] {
		return true
	}
	for _, w := range words[:min(labelWords, len(words)-2)] {
		if strings.HasSuffix(w, ":") || strings.HasSuffix(w, ",") {
			return true
		}
	}
	last := firstWord(words[len(words)-1])
	return apiTail[last] || tailWords[last] || resultWords[last] || formatWords[last] || last == "me" || last == "us"
}

// labelWords is the most words a leading label has.
const labelWords = 4

// labelOpeners are the words of a leading "Hey, …", "OK so, …", "First, …":
// said to the reader, before the request.
var labelOpeners = map[string]bool{"hey": true, "hi": true, "hello": true, "ok": true, "okay": true, "so": true,
	"well": true, "first": true, "then": true, "next": true, "now": true, "also": true, "please": true,
	"thanks": true, "alright": true, "sure": true, "right": true, "quick": true, "question": true, "btw": true,
	"and": true, "but": true, "finally": true, "lastly": true}

// withoutLabel drops a leading label: up to four words ending in a colon
// before a request that opens with a verb, a question or a wrapper
// ("Task: close an issue", "Kill switch: turn off a flag"), or a run of
// words said to the reader ending in a colon or a comma ("Quick question:
// …", "Hey, …", "OK so, …"). The request keeps at least two words.
func withoutLabel(words []string, toks [][]string) ([]string, [][]string) {
	for i := 0; i < labelWords && i < len(words)-2; i++ {
		w := words[i]
		switch {
		case strings.HasSuffix(w, ":"):
			next := toks[i+1]
			if len(next) > 0 && (startsVerb(next) || questionWords[next[0]] || framingWords[next[0]]) || openers(toks[:i+1]) {
				if j := anaphor(words[:i+1], toks[:i+1], toks[i+1:]); j > 0 {
					return withLabel(words, toks, i+1, i+1+j)
				}
				return words[i+1:], toks[i+1:]
			}
			return words, toks
		case strings.HasSuffix(w, ","):
			if !openers(toks[:i+1]) {
				return words, toks
			}
			return words[i+1:], toks[i+1:]
		}
	}
	return words, toks
}

// anaphors are the pronouns by which a request after a label names it
// ("Webhooks: delete one", "Pull requests: list the open ones").
var anaphors = map[string]bool{"it": true, "one": true, "ones": true, "them": true}

// taskLabels name the request itself, not what it acts on ("Task: …",
// "Goal: …", "TODO: …").
var taskLabels = map[string]bool{"task": true, "goal": true, "todo": true, "request": true, "note": true,
	"step": true, "objective": true, "ask": true, "context": true, "problem": true, "job": true, "action": true,
	"question": true, "query": true, "help": true, "asap": true, "urgent": true, "fyi": true, "re": true}

// anaphor is the index in rest of the pronoun that stands for a leading
// label, 0 when none does: one of the request's first four words after its
// verb, when the label names a thing (no word of it said to the reader, or
// naming the task: "Quick question: can you delete it" keeps "it").
func anaphor(label []string, labelToks, rest [][]string) int {
	for _, ws := range labelToks {
		for _, t := range ws {
			if labelOpeners[t] || taskLabels[t] || framingWords[t] || framingCues[t] {
				return 0
			}
		}
	}
	for j := 1; j < len(rest) && j <= 4; j++ {
		if len(rest[j]) == 1 && anaphors[rest[j][0]] {
			return j
		}
	}
	return 0
}

// withLabel is the request after words[:from], its word at at (a pronoun)
// replaced by the label's words: "Webhooks: delete one" -> "delete
// Webhooks".
func withLabel(words []string, toks [][]string, from, at int) ([]string, [][]string) {
	label := append([]string(nil), words[:from]...)
	label[from-1] = strings.TrimSuffix(label[from-1], ":")
	w := append(append(append([]string(nil), words[from:at]...), label...), words[at+1:]...)
	t := append(append(append([][]string(nil), toks[from:at]...), toks[:from]...), toks[at+1:]...)
	return w, t
}

// openers reports whether every word of toks is a labelOpener.
func openers(toks [][]string) bool {
	for _, ws := range toks {
		for _, t := range ws {
			if !labelOpeners[t] {
				return false
			}
		}
	}
	return true
}

// thirdPerson is the base form of a verb's third person singular ("lists"
// -> list, "deletes" -> delete, "copies" -> copy), or "".
func thirdPerson(toks []string) string {
	if len(toks) != 1 || len(toks[0]) < 4 || !strings.HasSuffix(toks[0], "s") || strings.HasSuffix(toks[0], "ss") ||
		apiParts[toks[0]] || framingWords[toks[0]] {
		return ""
	}
	t := toks[0]
	for _, l := range Lemmas(t) {
		if l != t && isVerb(l) && !apiParts[l] && !framingWords[l] && (t == l+"s" || t == l+"es" || strings.HasSuffix(l, "y") && t == l[:len(l)-1]+"ies") {
			return l
		}
	}
	return ""
}

// auxiliary reports whether t is a verb that helps another: after it, the
// word before was a noun ("which API groups does …").
func auxiliary(t string) bool { return questionWords[t] || modals[t] }

// tailWords are the words of a closing "…, please", "… thanks": said to
// the reader, not about the request ("now" and "immediately" can be: "send
// a campaign right now").
var tailWords = map[string]bool{"please": true, "thanks": true, "thank": true, "thx": true, "kindly": true}

// resultWords name what a call gives back; echoVerbs ask for it: "… and
// return the result", "… and show me the output", "… and print it".
var (
	resultWords = map[string]bool{"result": true, "results": true, "it": true, "them": true, "output": true,
		"response": true, "answer": true, "outcome": true}
	echoVerbs = map[string]bool{"return": true, "show": true, "print": true, "give": true, "display": true,
		"output": true, "tell": true, "report": true}
	// formatWords name the format an answer is asked in when it is the one
	// every REST API answers in: "… as JSON", "… (in JSON)". Another
	// format is part of the request ("download messages as CSV").
	formatWords = map[string]bool{"json": true}
)

// withoutTails drops the tails that address the reader (see requestOf),
// each keeping at least two words of the request, in any order.
func withoutTails(words []string, toks [][]string) []string {
	one := func(i int) string { return single(toks, i) }
	for n := len(words); n > 2; n = len(words) {
		switch last := one(n - 1); {
		// "using the API", "via the REST API".
		case n >= 4 && apiTail[last]:
			j := n - 2
			for j > 0 && (apiTail[one(j)] || one(j) == "the" || one(j) == "a" || one(j) == "an") {
				j--
			}
			if j < 2 || !tailPrepositions[one(j)] {
				return words
			}
			words, toks = words[:j], toks[:j]
		// "please", "thanks", "thank you".
		case tailWords[last] || last == "you" && one(n-2) == "thank":
			j := n - 1
			if last == "you" {
				j--
			}
			words, toks = words[:j], toks[:j]
		// "as JSON", "in JSON".
		case formatWords[last] && n >= 4:
			j := n - 2
			if one(j) == "a" {
				j--
			}
			if one(j) != "as" && one(j) != "in" {
				return words
			}
			words, toks = words[:j], toks[:j]
		// "and return the result", "and then show me the output", "and
		// print it".
		case resultWords[last] && n >= 5:
			j := n - 2
			for j > 0 && (one(j) == "the" || one(j) == "me" || one(j) == "us" || one(j) == "back" ||
				one(j) == "its" || one(j) == "their" || one(j) == "a") {
				j--
			}
			if !echoVerbs[one(j)] {
				return words
			}
			if one(j-1) == "then" {
				j--
			}
			if one(j-1) != "and" || j-1 < 2 {
				return words
			}
			words, toks = words[:j-1], toks[:j-1]
		// "for me", "for us": whom the call is made for.
		case (last == "me" || last == "us") && one(n-2) == "for" && n >= 4:
			words, toks = words[:n-2], toks[:n-2]
		default:
			return words
		}
	}
	return words
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
	for _, r := range query {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
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

// hostName reports whether w is a domain or file name: words of letters,
// digits and hyphens joined by dots, the last of two letters or more
// ("example.com", "www.example.com", "package.json"); a sentence's own
// punctuation after it does not count, and "e.g." is no name.
func hostName(w string) bool {
	w = strings.TrimRight(w, ".,;:!?)")
	first := strings.IndexByte(w, '.')
	last := strings.LastIndexByte(w, '.')
	if first < 2 || last == len(w)-1 || len(w)-last-1 < 2 {
		return false
	}
	prevDot := false
	for k, r := range w {
		switch {
		case r == '.':
			if prevDot {
				return false // an empty part
			}
			prevDot = true
			continue
		case k > last && !unicode.IsLetter(r):
			return false
		case !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-':
			return false
		}
		prevDot = false
	}
	return true
}
