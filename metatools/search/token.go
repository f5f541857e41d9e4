package search

import (
	"strings"
	"unicode"
)

// Tokenize splits text into lowercase words: on anything that is not a letter
// or digit (spaces, punctuation, `_`, `-`, `/`, `:`, `.`), at camelCase
// boundaries ("listUserRepos" -> list user repos, "HTTPServer" -> http
// server, "PodIPs" -> pod ips) and between letters and digits ("v2beta" -> v 2 beta). Words are
// not stemmed; see Terms.
func Tokenize(text string) []string {
	var out []string
	rs := []rune(text)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, strings.ToLower(string(rs[start:end])))
		}
		start = -1
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		prev := rs[i-1]
		switch {
		case unicode.IsLower(prev) && unicode.IsUpper(r):
			flush(i)
			start = i
		case unicode.IsUpper(prev) && unicode.IsUpper(r) && i+1 < len(rs) && unicode.IsLower(rs[i+1]) && !pluralAcronym(rs, i+1):
			flush(i)
			start = i
		case unicode.IsDigit(prev) != unicode.IsDigit(r):
			flush(i)
			start = i
		}
	}
	flush(len(rs))
	return out
}

// pluralAcronym reports whether rs[i] is the "s" that ends an acronym's
// plural ("IPs", "APIs", "PRs"): the acronym keeps its last capital ("IPs"
// is ips, not i + ps). An "s" that opens a longer word starts it: "HTTPServer".
func pluralAcronym(rs []rune, i int) bool {
	return rs[i] == 's' && (i+1 == len(rs) || !unicode.IsLower(rs[i+1]))
}

// stopwords carry no meaning for tool search. Intent words ("all", "new")
// are deliberately absent: they select between list, get and create; so are
// the scope words "me", "my", "own" (see scopeWords).
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "for": true, "in": true,
	"on": true, "and": true, "or": true, "is": true, "are": true, "be": true, "by": true,
	"with": true, "from": true, "at": true, "as": true, "it": true, "its": true, "this": true,
	"that": true, "these": true, "those": true, "i": true, "we": true,
	"our": true, "you": true, "your": true, "can": true, "how": true, "do": true, "does": true,
	"want": true, "need": true, "please": true, "some": true, "which": true, "will": true,
	"into": true, "using": true, "via": true, "so": true, "if": true, "then": true, "there": true,
	"what": true, "would": true, "should": true, "let": true, "us": true, "was": true,
	"been": true, "has": true, "have": true, "any": true, "one": true, "given": true,
}

// Intent is what a tool does to its resource, or what a query asks for.
type Intent string

// The intents of the verb synonym groups.
const (
	IntentNone   Intent = ""
	IntentCreate Intent = "create"
	IntentList   Intent = "list"
	IntentGet    Intent = "get"
	IntentUpdate Intent = "update"
	IntentDelete Intent = "delete"
	IntentSearch Intent = "search"
)

// intentWords maps an unstemmed word to its intent. HTTP methods count: an
// OpenAPI operation id such as GET_alerts names its intent that way.
var intentWords = map[string]Intent{
	"create": IntentCreate, "add": IntentCreate, "new": IntentCreate, "make": IntentCreate,
	"insert": IntentCreate, "post": IntentCreate, "register": IntentCreate, "generate": IntentCreate,
	"creates": IntentCreate, "adds": IntentCreate, "creating": IntentCreate, "adding": IntentCreate,
	"open": IntentCreate, "submit": IntentCreate, "upload": IntentCreate, "send": IntentCreate,
	"save": IntentCreate, "store": IntentCreate, "start": IntentCreate, "launch": IntentCreate,
	"upsert": IntentCreate, "inserts": IntentCreate, "subscribe": IntentCreate, "reply": IntentCreate,

	"list": IntentList, "show": IntentList, "all": IntentList, "enumerate": IntentList,
	"browse": IntentList, "lists": IntentList, "listing": IntentList, "every": IntentList,

	"get": IntentGet, "read": IntentGet, "fetch": IntentGet, "retrieve": IntentGet,
	"view": IntentGet, "gets": IntentGet, "retrieves": IntentGet, "returns": IntentGet,
	"return": IntentGet, "detail": IntentGet, "details": IntentGet, "display": IntentGet,
	"obtain": IntentGet, "see": IntentGet, "check": IntentGet, "inspect": IntentGet, "download": IntentGet, "downloads": IntentGet,

	"update": IntentUpdate, "edit": IntentUpdate, "set": IntentUpdate, "modify": IntentUpdate,
	"change": IntentUpdate, "patch": IntentUpdate, "put": IntentUpdate, "rename": IntentUpdate,
	"replace": IntentUpdate, "updates": IntentUpdate, "updating": IntentUpdate, "alter": IntentUpdate,
	"configure": IntentUpdate, "enable": IntentUpdate, "disable": IntentUpdate,

	"delete": IntentDelete, "remove": IntentDelete, "destroy": IntentDelete, "erase": IntentDelete,
	"drop": IntentDelete, "del": IntentDelete, "deletes": IntentDelete, "removes": IntentDelete,
	"purge": IntentDelete, "clear": IntentDelete, "revoke": IntentDelete, "unregister": IntentDelete,
	"kill": IntentDelete, "cancel": IntentDelete, "terminate": IntentDelete, "discard": IntentDelete, "trash": IntentDelete,
	"release": IntentDelete, "unplug": IntentDelete,

	"search": IntentSearch, "find": IntentSearch, "query": IntentSearch, "lookup": IntentSearch,
	"filter": IntentSearch, "look": IntentSearch, "searches": IntentSearch, "locate": IntentSearch,
}

// IntentOf reports the intent of a single word, if it has one.
func IntentOf(word string) Intent { return intentWords[strings.ToLower(word)] }

// intentTerm is the index term that stands for an intent: it cannot collide
// with a word because words hold only letters and digits.
func intentTerm(i Intent) string { return "~" + string(i) }

// Terms turns text into index terms: tokens without stopwords, lemmatized
// (see Lemmas; a word may give two terms).
func Terms(text string) []string {
	toks := Tokenize(text)
	out := make([]string, 0, len(toks))
	for _, t := range toks {
		if stopwords[t] {
			continue
		}
		out = append(out, Lemmas(t)...)
	}
	return out
}
