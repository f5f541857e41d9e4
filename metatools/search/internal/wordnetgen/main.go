// Command wordnetgen builds the compact lexical table that metatools/search
// embeds (lexicon.txt.gz) from a WordNet 3.0 database, as Debian's
// wordnet-base package installs it (/usr/share/wordnet). It is run by hand
// (go generate ./metatools/search/) when the table should change; the
// output is committed, so neither builds nor the gateway need WordNet.
//
// The table has three sections:
//
//	[lemmas]      every one-word lemma with its parts of speech (n v a r),
//	              which the lemmatizer (WordNet's morphy) checks candidates against
//	[exceptions]  irregular forms and their lemmas (noun.exc, verb.exc, adj.exc)
//	[related]     per lemma, its derivationally related forms (WordNet "+"
//	              pointers of its most frequent senses) and its synonyms (the
//	              other one-word lemmas of its two most frequent senses); a
//	              derived form is marked with a leading "+"
//
// A second table (broader.txt.gz) holds, per lemma, its broader words: the
// hypernyms ("h:") and attributes ("a:") of its two most frequent senses (or
// its first, when no sense is tagged), which the search reads only for a
// word that neither the catalog nor its relatives know.
//
// WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
// Used under the WordNet 3.0 license (see the generated file's header).
package main

import (
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

var (
	dict       = flag.String("dict", "/usr/share/wordnet", "WordNet database directory")
	out        = flag.String("out", "lexicon.txt.gz", "output file: lemmas, exceptions, related words")
	broaderOut = flag.String("broader", "broader.txt.gz", "output file: broader words")
)

// How many senses of a lemma contribute, most frequent first.
const (
	synonymSenses    = 2
	derivationSenses = 3
	maxRelated       = 8
	// broaderSenses of a lemma contribute to its [broader] words: its tagged
	// senses, or its first sense when none is tagged (a rare word, the kind
	// a catalog does not have, often has one sense and no tagged one).
	broaderSenses = 2
	maxBroader    = 4
)

// broaderKind maps the WordNet pointer symbols the [broader] section reads to
// the letter that marks a word there: h a hypernym, a broader word (truck:
// vehicle; a compound's head stands for it: motor_vehicle, vehicle; a time
// period, period), a an attribute, the noun an adjective is a value of
// (successful: success; heavy: weight). Hyponyms, "similar to", "also see",
// verb groups, pertainyms, parts and wholes, entailments and causes were
// measured too and gained nothing (docs/search.md), so they are left out.
var broaderKind = map[string]byte{"@": 'h', "=": 'a'}

// Lexicographer files whose synsets add no [broader] words.
const (
	lexAnimal = 5
	lexPlant  = 20
)

// posFiles are read verbs first: a query word's verb senses (its intent) lead its
// related words.
var posFiles = []struct {
	name string
	tag  byte
}{{"verb", 'v'}, {"noun", 'n'}, {"adj", 'a'}, {"adv", 'r'}}

type synset struct {
	// lexFile is the synset's lexicographer file (05 noun.animal, 20
	// noun.plant).
	lexFile int
	words   []string
	// deriv[i] lists the (word, synset offset, pos) targets of the lexical
	// "+" pointers whose source is word i (1-based; 0 means every word).
	deriv map[int][]target
	// ptrs are the synset's other pointers that the [broader] section
	// reads, by kind (see broaderKind).
	ptrs []pointer
}

// wordNumber is w's number among the synset's words (1-based, the
// numbering of a lexical pointer's source), or 0 when it is not one.
func (s *synset) wordNumber(w string) int {
	n := 0
	for i, sw := range s.words {
		if sw == w {
			n = i + 1
		}
	}
	return n
}

type target struct {
	pos    byte
	offset int64
	word   int
}

type pointer struct {
	kind byte
	src  int
	target
}

func oneWord(w string) bool {
	if w == "" {
		return false
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// cleanWord lowercases a data-file word and drops adjective markers "(a)".
func cleanWord(w string) string {
	if i := strings.IndexByte(w, '('); i >= 0 {
		w = w[:i]
	}
	return strings.ToLower(w)
}

func readData(pos string) map[int64]*synset {
	f, err := os.Open(filepath.Join(*dict, "data."+pos))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	m := map[int64]*synset{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") {
			continue // licence header
		}
		if i := strings.Index(line, " | "); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		off, _ := strconv.ParseInt(f[0], 10, 64)
		wc, _ := strconv.ParseInt(f[3], 16, 64)
		lf, _ := strconv.Atoi(f[1])
		s := &synset{lexFile: lf, deriv: map[int][]target{}}
		i := 4
		for range wc {
			s.words = append(s.words, cleanWord(f[i]))
			i += 2
		}
		pc, _ := strconv.Atoi(f[i])
		i++
		for range pc {
			sym, toff, tpos, st := f[i], f[i+1], f[i+2], f[i+3]
			i += 4
			o, _ := strconv.ParseInt(toff, 10, 64)
			src, _ := strconv.ParseInt(st[:2], 16, 64)
			dst, _ := strconv.ParseInt(st[2:], 16, 64)
			p := tpos[0]
			if p == 's' {
				p = 'a'
			}
			t := target{pos: p, offset: o, word: int(dst)}
			if sym == "+" {
				s.deriv[int(src)] = append(s.deriv[int(src)], t)
				continue
			}
			if k := broaderKind[sym]; k != 0 {
				s.ptrs = append(s.ptrs, pointer{kind: k, src: int(src), target: t})
			}
		}
		m[off] = s
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}
	return m
}

func main() {
	flag.Parse()
	data := map[byte]map[int64]*synset{}
	for _, p := range posFiles {
		data[p.tag] = readData(p.name)
	}
	lemmas := map[string]map[byte]bool{}
	related := map[string][]string{}
	broader := map[string][]string{}
	addBroad := func(w string, kind byte, r string) {
		if i := strings.LastIndexByte(r, '_'); i >= 0 && kind == 'h' {
			// A compound's head stands for it: motor_vehicle is a vehicle.
			r = r[i+1:]
		}
		if r == w || !oneWord(r) {
			return
		}
		n := 0
		for _, x := range broader[w] {
			if x[0] == kind {
				n++
			}
			if x[2:] == r {
				return
			}
		}
		if n < maxBroader {
			broader[w] = append(broader[w], string(kind)+":"+r)
		}
	}
	addRel := func(w, r string, derived bool) {
		if r == w || !oneWord(r) {
			return
		}
		if derived {
			r = "+" + r
		}
		for _, x := range related[w] {
			if strings.TrimPrefix(x, "+") == strings.TrimPrefix(r, "+") {
				return
			}
		}
		related[w] = append(related[w], r)
	}
	for _, p := range posFiles {
		f, err := os.Open(filepath.Join(*dict, "index."+p.name))
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, " ") {
				continue
			}
			fs := strings.Fields(line)
			w := fs[0]
			if !oneWord(w) {
				continue
			}
			if lemmas[w] == nil {
				lemmas[w] = map[byte]bool{}
			}
			lemmas[w][p.tag] = true
			nptr, _ := strconv.Atoi(fs[3])
			// Senses are listed most frequent first; only those seen in the
			// sense-tagged corpus (tagsense_cnt) contribute related words,
			// so rare senses ("close" as a noun meaning an end) add no noise.
			tagged, _ := strconv.Atoi(fs[4+nptr+1])
			offs := fs[4+nptr+2:]
			for _, o := range offs[:min(len(offs), max(tagged, 1), broaderSenses)] {
				off, _ := strconv.ParseInt(o, 10, 64)
				s := data[p.tag][off]
				if s == nil {
					continue
				}
				pos := s.wordNumber(w)
				if p.tag == 'n' && (s.lexFile == lexAnimal || s.lexFile == lexPlant) {
					// The taxonomy of living things is a third of
					// WordNet's nouns and no API's vocabulary.
					continue
				}
				for _, pt := range s.ptrs {
					if pt.src != 0 && pt.src != pos {
						continue
					}
					ts := data[pt.pos][pt.offset]
					if ts == nil {
						continue
					}
					if pt.word >= 1 && pt.word <= len(ts.words) {
						addBroad(w, pt.kind, ts.words[pt.word-1])
						continue
					}
					for _, tw := range ts.words {
						addBroad(w, pt.kind, tw)
					}
				}
			}
			if len(offs) > tagged {
				offs = offs[:tagged]
			}
			for si, o := range offs {
				off, _ := strconv.ParseInt(o, 10, 64)
				s := data[p.tag][off]
				if s == nil {
					continue
				}
				pos := s.wordNumber(w)
				if si < derivationSenses {
					for _, key := range []int{0, pos} {
						for _, t := range s.deriv[key] {
							if ts := data[t.pos][t.offset]; ts != nil && t.word >= 1 && t.word <= len(ts.words) {
								addRel(w, ts.words[t.word-1], true)
							}
						}
					}
				}
				if si < synonymSenses {
					for _, sw := range s.words {
						addRel(w, sw, false)
					}
				}
			}
		}
		f.Close()
	}
	exc := map[string][]string{}
	for _, p := range []string{"noun", "verb", "adj"} {
		f, err := os.Open(filepath.Join(*dict, p+".exc"))
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 2 || !oneWord(fs[0]) {
				continue
			}
			for _, l := range fs[1:] {
				if oneWord(l) && !contains(exc[fs[0]], l) {
					exc[fs[0]] = append(exc[fs[0]], l)
				}
			}
		}
		f.Close()
	}

	writeTable(*out, func(bw *bufio.Writer) {
		fmt.Fprintln(bw, "[lemmas]")
		for _, w := range sortedKeys(lemmas) {
			var tags []byte
			for _, p := range posFiles {
				if lemmas[w][p.tag] {
					tags = append(tags, p.tag)
				}
			}
			fmt.Fprintf(bw, "%s %s\n", w, tags)
		}
		fmt.Fprintln(bw, "[exceptions]")
		for _, w := range sortedKeys(exc) {
			fmt.Fprintf(bw, "%s %s\n", w, strings.Join(exc[w], " "))
		}
		fmt.Fprintln(bw, "[related]")
		for _, w := range sortedKeys(related) {
			rs := related[w]
			if len(rs) > maxRelated {
				rs = rs[:maxRelated]
			}
			fmt.Fprintf(bw, "%s %s\n", w, strings.Join(rs, " "))
		}
	})
	// The broader words are a table of their own, sorted by lemma: the
	// search reads it only for a word nothing else relates to the catalog,
	// by bisection, so it costs the lexicon's decoding nothing.
	writeTable(*broaderOut, func(bw *bufio.Writer) {
		for _, w := range sortedKeys(broader) {
			fmt.Fprintf(bw, "%s %s\n", w, strings.Join(broader[w], " "))
		}
	})
}

// writeTable writes a gzipped table with WordNet's licence header.
func writeTable(path string, body func(*bufio.Writer)) {
	o, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(o, gzip.BestCompression)
	bw := bufio.NewWriter(zw)
	fmt.Fprintln(bw, "# Generated by metatools/search/internal/wordnetgen from WordNet 3.0; do not edit.")
	fmt.Fprintln(bw, "# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. Permission to use,")
	fmt.Fprintln(bw, "# copy, modify and distribute this database for any purpose and without fee or royalty is granted")
	fmt.Fprintln(bw, "# under the WordNet 3.0 license; the name of Princeton University may not be used in advertising.")
	body(bw)
	if err := bw.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		log.Fatal(err)
	}
	if err := o.Close(); err != nil {
		log.Fatal(err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
