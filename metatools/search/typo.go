package search

import (
	"slices"
	"strings"
)

// Requests are typed in a hurry, by people and by models copying them:
// "isue", "lables", "webhoks", "craete". A mistyped word is in no tool and
// in no dictionary, so it scored nothing, and when it was the request's verb
// or object the ranking lost its footing (on the tuning catalogs one such
// typo in the request's longest word cost a third of the MRR). A word that
// neither the catalog nor WordNet knows is read as the catalog's word one
// edit away (a letter dropped, added, changed, or two swapped: Damerau
// distance 1), the most frequent one when several are. Words WordNet knows
// are never changed: a real word typed for another ("crate") cannot be told
// from one meant.

// withoutTypos returns query with each mistyped word (see corrected)
// replaced by the catalog's word it stands for; a word split in two that
// tools have ("configmap") is no typo.
func (ix *BM25) withoutTypos(query string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(query); {
		if !isLetter(query[i]) {
			i++
			continue
		}
		j := i
		for j < len(query) && isLetter(query[j]) {
			j++
		}
		if j < len(query) && query[j] >= 0x80 {
			i = j + 1 // a word with other letters is left alone
			for i < len(query) && query[i] != ' ' {
				i++
			}
			continue
		}
		w := strings.ToLower(query[i:j])
		if hasInnerUpper(query[i:j]) {
			i = j // an identifier ("issueCreateIssue"): its words are split, not mistyped
			continue
		}
		if _, _, joined := ix.splitJoined(w); !joined {
			if c, ok := ix.corrected(w); ok {
				b.WriteString(query[last:i])
				b.WriteString(c)
				last = j
			}
		}
		i = j
	}
	if last == 0 {
		return query
	}
	b.WriteString(query[last:])
	return b.String()
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// minTypoLen is the shortest word read as a typo; a four-letter word only
// as one that lost a letter ("isue"): among short words, one edit reaches
// too many others ("saml" is not "same").
const minTypoLen = 4

// corrected returns the word that t, a word neither the catalog nor WordNet
// knows, most likely misspells; ok is false when there is none. The
// catalog's words come first, the most frequent of them; else WordNet's
// lemma, when only one is one edit away ("ticekt": ticket, which the
// catalog may call an issue). An inflection is kept: the edit is also
// looked for in the word without its ending ("lables": label + s,
// "allwoed": allow + ed, "priortiies": priority + ies).
func (ix *BM25) corrected(t string) (string, bool) {
	if len(t) < minTypoLen || len(t) > maxRepairedWordLen || !isLower(t) || stopwords[t] || ix.appSet[t] {
		return "", false
	}
	l := lex()
	for _, lm := range Lemmas(t) {
		if _, ok := ix.idf[lm]; ok {
			return "", false
		}
		if _, ok := l.pos[lm]; ok {
			return "", false
		}
	}
	if ix.prefixed(t) {
		return "", false
	}
	// The catalog's words first, in t as written and then without each
	// ending it has; WordNet's lemmas only when none is found.
	var e typoEdits
	for _, lemmas := range []bool{false, true} {
		if lemmas && len(t) < minLemmaTypoLen {
			break
		}
		if ix.oneEditAway(t, "", "", lemmas, &e); e.best != "" {
			return e.best, true
		}
		for _, end := range inflections {
			if stem, ok := strings.CutSuffix(t, end.written); ok && len(stem) >= minTypoLen-1 {
				if ix.oneEditAway(stem+end.base, end.base, end.written, lemmas, &e); e.best != "" {
					return e.best, true
				}
			}
		}
	}
	if len(e.lemmas) == 1 {
		return e.lemmas[0], true
	}
	return "", false
}

// minLemmaTypoLen is the shortest word read as a typo of a word only
// WordNet knows: WordNet holds many short rare words ("onto" is one edit
// from "conto"), so a short guess there is more often wrong than right.
const minLemmaTypoLen = 5

// prefixes are the particles English makes new words with: "upvote",
// "onboard", "unfollow", "offboard", "subaccount" are a known word behind
// one, not a typo of another word ("upvote" is not "unvote").
var prefixes = []string{"up", "on", "in", "out", "off", "over", "under", "un", "re", "pre", "sub", "co", "de", "dis", "non", "multi", "auto"}

// prefixed reports whether t is a known word behind one of the prefixes:
// a word of the catalog, or one of WordNet's of minLemmaTypoLen letters or
// more.
func (ix *BM25) prefixed(t string) bool {
	for _, p := range prefixes {
		rest, ok := strings.CutPrefix(t, p)
		if !ok || len(rest) < 3 {
			continue
		}
		if ix.known(rest) {
			return true
		}
		for _, lm := range Lemmas(rest) {
			if _, ok := lex().pos[lm]; ok && len(lm) >= minLemmaTypoLen {
				return true // a short rare word ("tsk", "mit") proves nothing
			}
		}
	}
	return false
}

// inflections are the endings a typo is also looked for without: written
// as the word ends, base as its stem then ends ("-ies": "-y").
var inflections = []struct{ written, base string }{
	{"s", ""}, {"es", ""}, {"ies", "y"}, {"ed", ""}, {"d", ""}, {"ing", ""}, {"er", ""}, {"ers", ""},
}

// typoEdits collects the words one edit away from a typo: the catalog's
// most frequent one (ties: the first in alphabetical order), and WordNet's
// lemmas (two are enough to say it is not clear which).
type typoEdits struct {
	best   string
	bestDF int32
	lemmas []string
}

// spellingWords is the catalog's words a typo may stand for: every term of
// letters only (lemmas: "label") and every title word as written
// ("labels"), with the document frequency of its lemma. Built once, on the
// first typo: most indexes never need it.
func (ix *BM25) spellingWords() map[string]int32 {
	ix.spellingOnce.Do(func() {
		sp := make(map[string]int32, len(ix.postings)+len(ix.words))
		for t, ps := range ix.postings {
			if len(t) >= 3 && isLower(t) {
				sp[t] = int32(len(ps))
			}
		}
		for w := range ix.words {
			if _, ok := sp[w]; !ok && len(w) >= 3 && isLower(w) {
				if df := len(ix.postings[Lemmas(w)[0]]); df > 0 {
					sp[w] = int32(df)
				}
			}
		}
		ix.spelling = sp
	})
	return ix.spelling
}

// oneEditAway adds to e the known words one edit from w: the catalog's, or
// with lemmas WordNet's (asked only when the catalog has none: WordNet is
// large). base is the part of such a word that ending replaces
// ("priority": y → ies).
func (ix *BM25) oneEditAway(w, base, ending string, lemmas bool, e *typoEdits) {
	sp := ix.spellingWords()
	pos := lex().pos
	try := func(c []byte) {
		if len(c) < 3 || !bytesHaveSuffix(c, base) {
			return
		}
		df := sp[string(c)]
		if lemmas {
			if _, ok := pos[string(c)]; !ok || len(e.lemmas) > 1 {
				return
			}
		} else if df == 0 {
			return
		}
		word := string(c[:len(c)-len(base)]) + ending
		switch {
		case !lemmas && (df > e.bestDF || df == e.bestDF && word < e.best):
			e.best, e.bestDF = word, df
		case lemmas && !slices.Contains(e.lemmas, word):
			e.lemmas = append(e.lemmas, word)
		}
	}
	buf := make([]byte, 0, len(w)+1)
	if len(w) > minTypoLen {
		for i := range len(w) { // a letter added
			buf = append(append(buf[:0], w[:i]...), w[i+1:]...)
			try(buf)
		}
		for i := 0; i+1 < len(w); i++ { // two letters swapped
			buf = append(buf[:0], w...)
			buf[i], buf[i+1] = buf[i+1], buf[i]
			try(buf)
		}
		for i := range len(w) { // a letter changed
			buf = append(buf[:0], w...)
			for c := byte('a'); c <= 'z'; c++ {
				if c != w[i] {
					buf[i] = c
					try(buf)
				}
			}
		}
	}
	for i := 0; i <= len(w); i++ { // a letter lost
		for c := byte('a'); c <= 'z'; c++ {
			buf = append(append(append(buf[:0], w[:i]...), c), w[i:]...)
			try(buf)
		}
	}
}

func bytesHaveSuffix(b []byte, suffix string) bool {
	return len(b) >= len(suffix) && string(b[len(b)-len(suffix):]) == suffix
}
