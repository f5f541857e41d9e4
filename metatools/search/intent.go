package search

import (
	"slices"
	"strings"
)

// phrasalIntents are two-word verbs whose intent is not their first word's:
// "set up" creates (where "set" alone updates), "look up" reads (where
// "look" alone searches).
var phrasalIntents = map[[2]string]Intent{
	{"set", "up"}: IntentCreate, {"sign", "up"}: IntentCreate, {"spin", "up"}: IntentCreate,
	{"start", "up"}: IntentCreate, {"put", "up"}: IntentCreate, {"kick", "off"}: IntentCreate,
	{"put", "in"}: IntentCreate, {"put", "into"}: IntentCreate, {"put", "on"}: IntentCreate, {"put", "onto"}: IntentCreate,
	{"look", "up"}: IntentGet, {"find", "out"}: IntentGet, {"pull", "up"}: IntentGet, {"check", "out"}: IntentGet,
	{"turn", "on"}: IntentUpdate, {"turn", "off"}: IntentUpdate, {"switch", "on"}: IntentUpdate,
	{"switch", "off"}: IntentUpdate, {"fill", "in"}: IntentUpdate, {"fill", "out"}: IntentUpdate,
	{"hand", "over"}: IntentUpdate, {"bring", "back"}: IntentUpdate, {"mark", "as"}: IntentUpdate,
	{"take", "down"}: IntentDelete, {"take", "back"}: IntentDelete, {"clean", "up"}: IntentDelete,
	{"get", "rid"}: IntentDelete, {"tear", "down"}: IntentDelete, {"wipe", "out"}: IntentDelete,
	{"sign", "out"}: IntentDelete, {"kick", "out"}: IntentDelete, {"log", "out"}: IntentDelete, {"log", "off"}: IntentDelete, {"take", "off"}: IntentDelete,
	{"take", "out"}: IntentDelete, {"throw", "away"}: IntentDelete, {"throw", "out"}: IntentDelete,
	{"roll", "out"}: IntentUpdate, {"roll", "back"}: IntentUpdate,
}

// questionWords open a question, which asks to read something: "who",
// "how many", "what is", "is it", "has it been".
var questionWords = map[string]bool{
	"who": true, "whom": true, "whose": true, "what": true, "which": true, "when": true, "where": true,
	"how": true, "is": true, "are": true, "was": true, "were": true, "has": true, "have": true, "does": true,
	"do": true, "did": true, "can": true, "could": true, "am": true,
}

// QueryIntents is what a request asks for: the intent of its first verb
// phrase (a phrasal verb counts as one), or a read when it is a question.
// Nil when the request names no intent ("google analytics tracking
// settings").
func QueryIntents(query string) []Intent {
	in, _ := queryIntent(Tokenize(query))
	return in
}

// queryIntent is QueryIntents over tokens; words reports which tokens
// carry the intent (a verb, both words of a phrasal verb).
func queryIntent(toks []string) (intents []Intent, words map[int]bool) {
	if len(toks) > 0 && questionWords[toks[0]] {
		return []Intent{IntentGet}, nil
	}
	// An adverb before the verb ("automatically move part of every
	// payment", "permanently delete a file") says how, not what: the
	// request opens with the verb after it.
	if len(toks) > 2 && mannerAdverb(toks[0]) && isVerb(Lemmas(toks[1])[len(Lemmas(toks[1]))-1]) {
		in, words := queryIntent(toks[1:])
		shifted := map[int]bool{}
		for i := range words {
			shifted[i+1] = true
		}
		return in, shifted
	}
	// A request that opens with a verb of its own takes its intent from
	// that verb (or a phrasal verb), never from a later intent word: the
	// later one is its object or a modifier ("schedule a job to run every
	// night" does not list, "give someone ownership of a filter" does not
	// search).
	verbFirst := len(toks) > 0 && intentWords[toks[0]] == IntentNone && isVerb(Lemmas(toks[0])[len(Lemmas(toks[0]))-1])
	// "stop watching an issue", "quit following someone": stopping an
	// activity undoes it.
	if len(toks) > 1 && ceaseVerbs[toks[0]] && gerund(toks[1]) {
		return []Intent{IntentDelete}, map[int]bool{0: true}
	}
	// A phrasal verb split by its object: "sign a customer up", "turn the
	// alerts off".
	// Without articles the object may be one word: "take tag off task".
	if first := phrasalSplit(toks); first > 0 {
		for j := first; j < len(toks) && j <= first+1; j++ {
			if toks[0] == "kick" && toks[j] == "off" {
				// "kick someone off the team" removes; "kick off a
				// build", unsplit, starts one.
				return []Intent{IntentDelete}, map[int]bool{0: true, j: true}
			}
			if in, ok := phrasalIntents[[2]string{toks[0], toks[j]}]; ok {
				return []Intent{in}, map[int]bool{0: true, j: true}
			}
		}
	}
	// "record a payment", "fix the memo on an entry": verbs that name an
	// intent only as the request's first word (a DNS record, a fix), and
	// on an object: "record that we received new stock" says what
	// happened, its clause the act.
	if len(toks) > 1 && !clauseOpeners[toks[1]] {
		if in, ok := openingIntents[toks[0]]; ok {
			return []Intent{in}, map[int]bool{0: true}
		}
	}
	if madeState(toks) > 0 {
		// "make my project public": the thing exists; it is changed.
		return []Intent{IntentUpdate}, map[int]bool{0: true}
	}
	for i, t := range toks {
		if i+1 < len(toks) {
			if in, ok := phrasalIntents[[2]string{t, toks[i+1]}]; ok {
				return []Intent{in}, map[int]bool{i: true, i + 1: true}
			}
		}
		if in := intentWords[t]; in != IntentNone {
			if verbFirst {
				continue
			}
			if in == IntentList {
				// "show the details of an event", "show me the detail of
				// a job": what is shown is one thing's details.
				j := i + 1
				for j < len(toks) && (determiners[toks[j]] || toks[j] == "me") {
					j++
				}
				if j < len(toks) && (toks[j] == "details" || toks[j] == "detail") {
					return []Intent{IntentGet}, map[int]bool{i: true, j: true}
				}
			}
			return []Intent{in}, map[int]bool{i: true}
		}
	}
	return nil, nil
}

// ToolIntents is what a tool does, from its local name: the first intent
// word, and every intent joined to it by "or" ("createOrUpdateFile" both
// creates and updates). An HTTP method in the name ("POST_customers",
// "PostCustomersCustomer") says less than the summary's verb ("Updates the
// specified customer"), so the summary's intent is preferred then.
func ToolIntents(name, summary string) []Intent {
	toks := Tokenize(localName(name, ""))
	var out []Intent
	method := false
	for i, t := range toks {
		in := intentWords[t]
		if in == IntentNone {
			continue
		}
		method = httpMethods[t]
		out = append(out, in)
		if t == "upsert" {
			// Insert or update.
			out = append(out, IntentUpdate)
		}
		for j := i + 1; j+1 < len(toks) && toks[j] == "or"; j += 2 {
			if in2 := intentWords[toks[j+1]]; in2 != IntentNone {
				out = append(out, in2)
			}
		}
		break
	}
	if len(out) > 0 && !method {
		out = appendListedIntents(out, summary)
		out = appendUpdateThatDeletes(out, summary, toks)
	}
	if len(out) == 0 || method {
		for _, t := range Tokenize(summary) {
			if in := intentWords[t]; in != IntentNone {
				if method && in != out[0] && !httpMethods[t] && methodCarries(out[0], in) {
					return []Intent{in}
				}
				if !method {
					return []Intent{in}
				}
				break
			}
		}
	}
	return out
}

// methodCarries reports whether a call whose name opens with the HTTP
// method word of intent method can do what a summary's intent word says:
// a POST, PUT or PATCH may create, update, search or act ("PostCustomers…":
// "Updates the specified customer"), a GET only reads, lists or searches,
// and a DELETE only deletes. A summary shared by every call of a resource
// ("Used to create new and read existing statement exports.", on its
// DELETE too) does not make a DELETE create.
func methodCarries(method, in Intent) bool {
	switch method {
	case IntentDelete:
		return in == IntentDelete
	case IntentGet:
		return in == IntentGet || in == IntentList || in == IntentSearch
	}
	return true
}

// methodYields is the HTTP method word that opens a tool's local name when
// the summary's first intent word says another intent ("PostCustomers…":
// "Updates the specified customer"), else "".
func methodYields(local, summary string) string {
	var first string
	for _, t := range Tokenize(localName(local, "")) {
		if intentWords[t] != IntentNone {
			first = t
			break
		}
	}
	if !httpMethods[first] {
		return ""
	}
	for _, t := range Tokenize(summary) {
		if in := intentWords[t]; in != IntentNone {
			if in != intentWords[first] && !httpMethods[t] && methodCarries(intentWords[first], in) {
				return first
			}
			return ""
		}
	}
	return ""
}

// openingIntents are verbs whose intent holds only when they open the
// request: elsewhere "record" and "fix" are nouns ("a DNS record", "the
// fix version of an issue"), so they are no intent words.
var openingIntents = map[string]Intent{"record": IntentCreate, "fix": IntentUpdate, "correct": IntentUpdate, "amend": IntentUpdate}

// clauseOpeners open a clause after a verb ("record that …", "fix what
// …").
var clauseOpeners = map[string]bool{"that": true, "what": true, "how": true, "when": true, "whether": true, "if": true}

// mannerAdverb reports whether w is an adverb of manner ("automatically",
// "permanently"): an -ly word that WordNet knows as an adverb only.
func mannerAdverb(w string) bool {
	return strings.HasSuffix(w, "ly") && lex().pos[w] == posAdv
}

// ceaseVerbs end the activity their gerund names.
var ceaseVerbs = map[string]bool{"stop": true, "quit": true, "cease": true}

// gerund reports whether w is the -ing form of a verb ("watching").
func gerund(w string) bool {
	if !strings.HasSuffix(w, "ing") {
		return false
	}
	for _, l := range Lemmas(w) {
		if l != w && isVerb(l) {
			return true
		}
	}
	return false
}

var httpMethods = map[string]bool{"get": true, "post": true, "put": true, "patch": true, "delete": true}

// scopeWords ask for the caller's own things ("issues assigned to me", "my
// filters"); APIs say that with these words, at these weights.
// "I" alone is no scope word ("do I need", "can I"), but "am I" is.
var scopeWords = map[string]bool{"me": true, "my": true, "mine": true, "myself": true, "own": true}

var scopeTerms = []weighted{
	{"authenticated", 0.45}, {"current", 0.4}, {"my", 0.4}, {"me", 0.4}, {"calling", 0.35}, {"own", 0.3}, {"self", 0.3},
}

// weighted is a query term with its weight.
type weighted struct {
	term string
	w    float64
}

// determiners and pronouns that follow an imperative verb: "star a repo",
// "follow someone".
var objectStarters = map[string]bool{
	"a": true, "an": true, "the": true, "this": true, "that": true, "these": true, "those": true,
	"my": true, "our": true, "your": true, "his": true, "her": true, "their": true, "its": true,
	"some": true, "someone": true, "somebody": true, "everyone": true, "everybody": true, "it": true,
	"them": true, "me": true, "us": true, "one": true, "all": true, "every": true, "each": true, "another": true,
}

// imperative reports whether a request opens with a verb and its object
// ("star a repo", "approve the pull request"): it asks to change something
// even when the verb is none of the CRUD verbs.
func imperative(toks []string) bool {
	if len(toks) < 2 || questionWords[toks[0]] {
		return false
	}
	// A word WordNet does not know ("upvote", "unstar", "dm") that takes
	// an object is a verb too.
	ls := Lemmas(toks[0])
	if _, known := lex().pos[ls[len(ls)-1]]; known && !isVerb(ls[len(ls)-1]) {
		return false
	}
	return objectStarters[toks[1]] || bareObject(toks)
}

// phrasalSplit is where a particle may first follow a phrasal verb's
// object (toks[1] on), 0 when the request does not open with a verb and
// its object: two words on after a determiner ("a customer up"), one on
// after a bare noun ("customer up").
func phrasalSplit(toks []string) int {
	switch {
	case len(toks) > 2 && pronounObjects[toks[1]]:
		return 2 // "kick someone out", "log them out"
	case len(toks) > 3 && objectStarters[toks[1]]:
		return 3
	case len(toks) > 2 && bareObject(toks):
		return 2
	}
	return 0
}

// pronounObjects are objectStarters that are a whole object.
var pronounObjects = map[string]bool{"someone": true, "somebody": true, "everyone": true, "everybody": true,
	"it": true, "them": true, "me": true, "us": true}

// determiners are the articles a request written in full sentences puts
// before its nouns.
var determiners = map[string]bool{"a": true, "an": true, "the": true}

// bareObject reports whether a request written without articles
// ("archive repo", "star repo", "activate SIM card") opens with a verb in
// its base form and a singular noun: telegraphic style drops the "a" that
// would have marked the object. A request with an article anywhere is written
// in full, so a first word without one is a noun of a compound ("issue
// comments on a PR").
func bareObject(toks []string) bool {
	for _, t := range toks {
		if determiners[t] {
			return false
		}
	}
	if !isVerb(toks[0]) && !prefixedVerb(toks[0]) || stopwords[toks[1]] || questionWords[toks[1]] {
		return false
	}
	// The object's head — the last of the words that follow the verb up
	// to a function word ("activate SIM card": card) — is a singular noun:
	// "watch pods", "issue comments" and "cash drawer shifts" are English
	// without an article, "archive repo" is not. Not a particle: "port out
	// requests".
	head := 1
	for head+1 < len(toks) && !stopwords[toks[head+1]] && !questionWords[toks[head+1]] && !particle(toks[head+1]) {
		head++
	}
	w := toks[head]
	if Lemmas(w)[0] != w || nominalization(w) {
		return false
	}
	bits, known := lex().pos[w]
	return !known || bits&posNoun != 0 && bits&posAdv == 0
}

// prefixedVerb reports whether w, a word WordNet does not know, is a verb
// behind one of the prefixes English makes new verbs with: "upvote",
// "unstar", "resync".
func prefixedVerb(w string) bool {
	if _, known := lex().pos[w]; known {
		return false
	}
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(w, p); ok && len(rest) >= 3 && isVerb(rest) {
			return true
		}
	}
	return false
}

// nominalization reports whether w is a noun made from a verb by a suffix
// ("assignment", "deletion", "approval"). After another noun it names that
// noun's act ("issue assignment", "user deletion"): a compound, not a verb
// and its object.
func nominalization(w string) bool {
	for _, suf := range []string{"ment", "tion", "sion", "al"} {
		if !strings.HasSuffix(w, suf) {
			continue
		}
		for _, r := range relatedWords(w) {
			// The verb is w's stem, maybe without its last letter or two
			// ("approve": approval, "delete": deletion, "decide":
			// decision), not a longer word ("comment": commentate).
			v := r.word
			if r.derived && isVerb(v) && len(v) < len(w) && len(v) >= 3 &&
				(strings.HasPrefix(w, v) || strings.HasPrefix(w, v[:len(v)-1]) || len(v) > 4 && strings.HasPrefix(w, v[:len(v)-2])) {
				return true
			}
		}
	}
	return false
}

// particle reports whether w can be an adverb or a preposition of a
// phrasal verb ("up", "out", "off"): WordNet lists it as an adverb.
func particle(w string) bool { return lex().pos[w]&posAdv != 0 }

// madeState is the index of the adjective a request that opens with "make"
// ends with, after the thing it makes so ("make my project public", "make a
// file publicly readable"): a state the request puts an existing thing in,
// as "mark … as" says. 0 when there is none ("make a new project", "make a
// backup": a noun, or an adjective right after an article, is what is made).
func madeState(toks []string) int {
	n := len(toks)
	if n < 3 || toks[0] != "make" || stopwords[toks[n-2]] || stopwords[toks[n-1]] {
		return 0
	}
	if l := Lemmas(toks[n-1]); lex().pos[l[0]]&posAdj != 0 && lex().pos[l[0]]&posVerb == 0 {
		return n - 1
	}
	return 0
}

// appendUpdateThatDeletes adds a delete to an update whose summary opens
// with a verb that deletes the tool's own object: an API that keeps what
// is revoked or cancelled does it by updating its status
// ("UPDATE_RequestInquiry": "Revoke a request for payment, by updating the
// status to REVOKED"). What is deleted must be named by the tool's name,
// and not as the owner of something else ("ChangeOwner": "Deletes the old
// owner's grants" changes an owner).
func appendUpdateThatDeletes(out []Intent, summary string, name []string) []Intent {
	toks := Tokenize(summary)
	if len(toks) < 2 || out[0] != IntentUpdate || slices.Contains(out, IntentDelete) {
		return out
	}
	if intentWords[toks[0]] != IntentDelete && intentWords[Lemmas(toks[0])[0]] != IntentDelete {
		return out
	}
	for i := 1; i < len(toks) && i <= 4; i++ {
		if !stopwords[toks[i]] && (slices.Contains(name, toks[i]) || slices.Contains(name, Lemmas(toks[i])[0])) {
			if i+1 < len(toks) && toks[i+1] == "s" {
				return out
			}
			return append(out, IntentDelete)
		}
	}
	return out
}

// appendListedIntents adds to a tool's intents those of a summary that opens
// with a list of verbs among which is the name's ("Creates, changes, or
// deletes a resource record set" of ChangeResourceRecordSets, "Adds, edits,
// or deletes tags"): one call does each of them.
func appendListedIntents(out []Intent, summary string) []Intent {
	var listed []Intent
	named := false
	for _, t := range Tokenize(summary) {
		if t == "or" || t == "and" {
			continue
		}
		in := intentWords[t]
		if in == IntentNone {
			in = intentWords[Lemmas(t)[0]]
		}
		if in == IntentNone {
			break
		}
		named = named || in == out[0]
		listed = append(listed, in)
	}
	if len(listed) < 2 || !named {
		return out
	}
	for _, in := range listed {
		// "Creates and returns a token": a call returns what it did.
		if in != IntentGet && in != IntentList && !slices.Contains(out, in) {
			out = append(out, in)
		}
	}
	return out
}

// setsNamedItem reports whether a tool that sets a thing does so
// with a PUT to the thing's own path, a parameter naming it ("SetSecret":
// PUT /secrets/{secret-name}): such a call creates the thing when the name
// is new and replaces it otherwise, as PUT does, so a request to add or
// store one is met as a request to change it is.
func setsNamedItem(local, method, path string, intents []Intent) bool {
	if !strings.EqualFold(method, "put") || len(intents) != 1 || intents[0] != IntentUpdate {
		return false
	}
	segs := pathSegments(path)
	if len(segs) < 2 || !strings.HasPrefix(segs[len(segs)-1], "{") {
		return false
	}
	for _, t := range Tokenize(local) {
		if intentWords[t] != IntentNone {
			// Not "put": a name made of the method and the path
			// ("PutChecksID") says only the method.
			return t == "set"
		}
	}
	return false
}
