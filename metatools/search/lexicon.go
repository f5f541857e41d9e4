package search

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"io"
	"slices"
	"strings"
	"sync"
)

//go:generate go run ./internal/wordnetgen -out lexicon.txt.gz -broader broader.txt.gz

// lexiconGz is the table generated from WordNet 3.0 by internal/wordnetgen:
// one-word lemmas with their parts of speech, irregular forms, and related
// words (derived forms and synonyms of the most frequent senses).
//
//go:embed lexicon.txt.gz
var lexiconGz []byte

// Parts of speech of a lemma, as bits.
const (
	posNoun uint8 = 1 << iota
	posVerb
	posAdj
	posAdv
)

type relWord struct {
	word    string
	derived bool
}

type lexicon struct {
	pos     map[string]uint8
	exc     map[string][]string
	related map[string][]relWord
}

// lex is decoded on first use, not at package init: sandbox workers and
// processes that never search do not pay for it.
var lex = sync.OnceValue(decodeLexicon)

// decodeLexicon reads the embedded table.
func decodeLexicon() *lexicon {
	l := &lexicon{pos: make(map[string]uint8, 80000), exc: map[string][]string{}, related: map[string][]relWord{}}
	zr, err := gzip.NewReader(bytes.NewReader(lexiconGz))
	if err != nil {
		panic("search: embedded lexicon is corrupt: " + err.Error())
	}
	sc := bufio.NewScanner(zr)
	section := ""
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			section = line
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		switch section {
		case "[lemmas]":
			var bits uint8
			for _, c := range rest {
				switch c {
				case 'n':
					bits |= posNoun
				case 'v':
					bits |= posVerb
				case 'a':
					bits |= posAdj
				case 'r':
					bits |= posAdv
				}
			}
			l.pos[word] = bits
		case "[exceptions]":
			l.exc[word] = strings.Fields(rest)
		case "[related]":
			for _, r := range strings.Fields(rest) {
				rw := relWord{word: strings.TrimPrefix(r, "+")}
				rw.derived = len(rw.word) != len(r)
				l.related[word] = append(l.related[word], rw)
			}
		}
	}
	if err := sc.Err(); err != nil {
		panic("search: embedded lexicon is corrupt: " + err.Error())
	}
	return l
}

// broaderGz is the second table internal/wordnetgen generates: per lemma,
// its hypernyms (h:) and attributes (a:), one line each, sorted.
//
//go:embed broader.txt.gz
var broaderGz []byte

// broadWord is one of a lemma's broader words: kind is 'h' for a hypernym (a
// broader word: truck, vehicle; yesterday, period) and 'a' for an attribute
// (the noun an adjective is a value of: successful, success).
type broadWord struct {
	word string
	kind byte
}

// broaderTable is the broader table's text without its header, decoded on
// the first word that needs it (a word nothing else relates to the
// catalog) and searched by bisection: it stays one block of text (1.4 MB),
// with no map of its 44,707 lemmas to build.
var broaderTable = sync.OnceValue(decodeBroader)

// decodeBroader reads the embedded broader table.
func decodeBroader() []byte {
	zr, err := gzip.NewReader(bytes.NewReader(broaderGz))
	if err != nil {
		panic("search: embedded broader table is corrupt: " + err.Error())
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		panic("search: embedded broader table is corrupt: " + err.Error())
	}
	for len(text) > 0 && text[0] == '#' {
		text = text[bytes.IndexByte(text, '\n')+1:]
	}
	return text
}

// broaderWords are a lemma's hypernyms and attributes (see broaderTable).
func broaderWords(lemma string) []broadWord {
	text := broaderTable()
	lo, hi := 0, len(text)
	for lo < hi {
		mid := (lo + hi) / 2
		start := bytes.LastIndexByte(text[:mid], '\n') + 1
		end := len(text)
		if i := bytes.IndexByte(text[start:], '\n'); i >= 0 {
			end = start + i
		}
		line := text[start:end]
		word, rest, _ := bytes.Cut(line, []byte{' '})
		switch c := bytes.Compare(word, []byte(lemma)); {
		case c < 0:
			lo = end + 1
		case c > 0:
			hi = start
		default:
			var out []broadWord
			for _, f := range bytes.Fields(rest) {
				if len(f) > 2 && f[1] == ':' {
					out = append(out, broadWord{word: string(f[2:]), kind: f[0]})
				}
			}
			return out
		}
	}
	return nil
}

// morphy's detachment rules (WordNet's morph.c): a suffix, its
// replacement, and the part of speech the result must have.
var detachRules = []struct {
	suffix, repl string
	pos          uint8
}{
	{"ses", "s", posNoun}, {"xes", "x", posNoun}, {"zes", "z", posNoun}, {"ches", "ch", posNoun},
	{"shes", "sh", posNoun}, {"men", "man", posNoun}, {"ies", "y", posNoun}, {"s", "", posNoun},
	{"ies", "y", posVerb}, {"es", "e", posVerb}, {"es", "", posVerb}, {"ed", "e", posVerb},
	{"ed", "", posVerb}, {"ing", "e", posVerb}, {"ing", "", posVerb}, {"s", "", posVerb},
	{"er", "", posAdj}, {"est", "", posAdj}, {"er", "e", posAdj}, {"est", "e", posAdj},
}

// Lemmas returns the index terms of one lowercase word: its WordNet base
// form (WordNet's morphy: irregular forms, then detachment rules checked
// against the lexicon), so "issues", "assignees", "starred" and "created"
// index as "issue", "assignee", "star" and "create". A word that is a lemma
// itself but also an inflection of a verb keeps both ("following" gives
// "following" and "follow"; "closed" gives "closed" and "close"), so an
// agentive or adjectival sense is not merged away: "followers" stays
// "follower". A word WordNet does not know loses a plural ending
// ("webhooks" -> "webhook"). Words that are not lowercase ASCII letters, or
// shorter than three letters, are returned as they are.
func Lemmas(word string) []string {
	if len(word) < 3 || !isLower(word) {
		return []string{word}
	}
	l := lex()
	if bits, ok := l.pos[word]; ok {
		// A base form; add the verb or the singular it inflects, if any
		// ("closed", "following", "followers").
		if bits&posVerb == 0 {
			if v := verbOf(l, word); v != "" {
				return []string{word, v}
			}
		}
		if sg := nounOf(l, word); sg != "" {
			return []string{word, sg}
		}
		return []string{word}
	}
	if e, ok := l.exc[word]; ok {
		return e[:1]
	}
	for _, r := range detachRules {
		if len(word) > len(r.suffix)+1 && strings.HasSuffix(word, r.suffix) {
			cand := word[:len(word)-len(r.suffix)] + r.repl
			if l.pos[cand]&r.pos != 0 {
				return []string{cand}
			}
		}
	}
	sg := plainSingular(word)
	if st := unknownStem(sg); st != sg {
		return []string{sg, st}
	}
	return []string{sg}
}

// unknownStem is the stem of a word WordNet does not know (API jargon:
// "namespaced", "autoscaler", "autoscaling"): its -ing, -ed or -er ending
// and a final "e" removed, so the forms of one jargon word meet ("namespac",
// "autoscal"). Known words never get one: WordNet tells their forms apart
// ("followers" is not "following").
func unknownStem(w string) string {
	for _, suf := range []string{"ing", "ed", "er"} {
		if strings.HasSuffix(w, suf) && len(w) >= len(suf)+4 {
			w = w[:len(w)-len(suf)]
			break
		}
	}
	if strings.HasSuffix(w, "e") && len(w) >= 5 {
		w = w[:len(w)-1]
	}
	return w
}

// verbOf is the verb a word inflects by a regular -ed/-ing/-s ending, or "".
func verbOf(l *lexicon, word string) string {
	for _, r := range detachRules {
		if r.pos != posVerb || !strings.HasSuffix(word, r.suffix) || len(word) <= len(r.suffix)+2 {
			continue
		}
		cand := word[:len(word)-len(r.suffix)] + r.repl
		if l.pos[cand]&posVerb != 0 {
			return cand
		}
	}
	// Doubled final consonant: "starred" is in the exceptions, "shipped"
	// may not be.
	for _, suf := range []string{"ed", "ing"} {
		if s := strings.TrimSuffix(word, suf); s != word && len(s) >= 3 && s[len(s)-1] == s[len(s)-2] {
			if cand := s[:len(s)-1]; l.pos[cand]&posVerb != 0 {
				return cand
			}
		}
	}
	return ""
}

// nounOf is the noun a word is the regular plural of, or "".
func nounOf(l *lexicon, word string) string {
	for _, r := range detachRules[:8] {
		if strings.HasSuffix(word, r.suffix) && len(word) > len(r.suffix)+2 && !strings.HasSuffix(word, "ss") {
			if cand := word[:len(word)-len(r.suffix)] + r.repl; l.pos[cand]&posNoun != 0 {
				return cand
			}
		}
	}
	return ""
}

// plainSingular strips a plural ending from a word WordNet does not know.
func plainSingular(w string) string {
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes"):
		return w[:len(w)-2]
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is") && len(w) > 3:
		return w[:len(w)-1]
	}
	return w
}

func isLower(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// relatedWords are the WordNet relatives of a lemma: derived forms first.
func relatedWords(lemma string) []relWord { return lex().related[lemma] }

// isVerb reports whether WordNet knows word as a verb lemma.
func isVerb(word string) bool { return lex().pos[word]&posVerb != 0 }

// regularNominalizations are the nouns a verb forms with -ion, -ation or
// -ment ("encrypt": encryption, "validate": validation, "expire":
// expiration) that WordNet knows, for a verb the table relates to no
// derived word: WordNet's derivation pointers come only with the senses
// its corpus tagged, and rare verbs have none.
func regularNominalizations(verb string) []string {
	l := lex()
	if l.pos[verb]&posVerb == 0 || len(verb) < 4 {
		return nil
	}
	for _, r := range l.related[verb] {
		if r.derived {
			return nil
		}
	}
	stem := strings.TrimSuffix(verb, "e")
	var out []string
	for _, n := range []string{verb + "ion", verb + "ation", stem + "ion", stem + "ation", verb + "ment"} {
		if l.pos[n]&posNoun != 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
