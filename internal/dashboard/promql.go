package dashboard

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// The PromQL this package evaluates: the subset the dashboard uses.
//
//	expr     := term [("-" | "/") term]
//	term     := number | "time()" | agg | call | selector | "(" expr ")"
//	agg      := ("sum" | "max") ["by" "(" labels ")"] "(" expr ")"
//	call     := ("rate" | "increase") "(" selector "[" duration "]" ")"
//	          | "histogram_quantile" "(" number "," expr ")"
//	selector := name ["{" matcher {"," matcher} "}"]
//	matcher  := label ("=" | "!=" | "=~" | "!~") string
//
// A dashboard query outside it is an error: the renderer and the test that
// checks the series names would not understand it.

// node is a parsed expression.
type node interface{}

type (
	numberNode float64
	timeNode   struct{}
	selector   struct {
		name     string
		matchers []matcher
	}
	rangeCall struct {
		fn     string // rate, increase
		sel    selector
		window time.Duration
	}
	quantileCall struct {
		q    float64
		expr node
	}
	aggregation struct {
		op   string // sum, max
		by   []string
		expr node
	}
	binary struct {
		op          byte // '-', '/'
		left, right node
	}
)

type matcher struct {
	label, op, value string
	re               *regexp.Regexp
}

func (m matcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default: // !~
		return !m.re.MatchString(v)
	}
}

type parser struct {
	s    string
	pos  int
	vars map[string]string
}

// Parse parses expr; vars replace $name in matcher values (a Grafana
// variable such as $instance; "All" is ".*").
func Parse(expr string, vars map[string]string) (node, error) {
	p := &parser{s: expr, vars: vars}
	n, err := p.expr()
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	p.space()
	if p.pos != len(p.s) {
		return nil, fmt.Errorf("%q: unexpected %q", expr, p.s[p.pos:])
	}
	return n, nil
}

func (p *parser) space() {
	for p.pos < len(p.s) && unicode.IsSpace(rune(p.s[p.pos])) {
		p.pos++
	}
}

func (p *parser) peek(tok string) bool {
	p.space()
	return strings.HasPrefix(p.s[p.pos:], tok)
}

func (p *parser) eat(tok string) error {
	if !p.peek(tok) {
		rest := p.s[p.pos:]
		if len(rest) > 20 {
			rest = rest[:20]
		}
		return fmt.Errorf("want %q at %q", tok, rest)
	}
	p.pos += len(tok)
	return nil
}

func (p *parser) ident() string {
	p.space()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '_' || c == ':' || unicode.IsLetter(rune(c)) || (p.pos > start && unicode.IsDigit(rune(c))) {
			p.pos++
			continue
		}
		break
	}
	return p.s[start:p.pos]
}

func (p *parser) number() (float64, error) {
	p.space()
	start := p.pos
	for p.pos < len(p.s) && (unicode.IsDigit(rune(p.s[p.pos])) || p.s[p.pos] == '.') {
		p.pos++
	}
	return strconv.ParseFloat(p.s[start:p.pos], 64)
}

func (p *parser) expr() (node, error) {
	left, err := p.term()
	if err != nil {
		return nil, err
	}
	for {
		p.space()
		if p.pos < len(p.s) && (p.s[p.pos] == '-' || p.s[p.pos] == '/') {
			op := p.s[p.pos]
			p.pos++
			right, err := p.term()
			if err != nil {
				return nil, err
			}
			left = binary{op: op, left: left, right: right}
			continue
		}
		return left, nil
	}
}

func (p *parser) term() (node, error) {
	p.space()
	if p.pos >= len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	if c := p.s[p.pos]; unicode.IsDigit(rune(c)) {
		n, err := p.number()
		return numberNode(n), err
	}
	if p.peek("(") {
		p.pos++
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		return n, p.eat(")")
	}
	name := p.ident()
	switch name {
	case "":
		return nil, fmt.Errorf("unexpected %q", p.s[p.pos:])
	case "time":
		if err := p.eat("("); err != nil {
			return nil, err
		}
		return timeNode{}, p.eat(")")
	case "sum", "max":
		a := aggregation{op: name}
		if p.peek("by") {
			p.pos += 2
			if err := p.eat("("); err != nil {
				return nil, err
			}
			for !p.peek(")") {
				l := p.ident()
				if l == "" {
					return nil, fmt.Errorf("bad label list")
				}
				a.by = append(a.by, l)
				if p.peek(",") {
					p.pos++
				}
			}
			p.pos++
		}
		if err := p.eat("("); err != nil {
			return nil, err
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		a.expr = e
		return a, p.eat(")")
	case "rate", "increase":
		if err := p.eat("("); err != nil {
			return nil, err
		}
		sel, err := p.selector(p.ident())
		if err != nil {
			return nil, err
		}
		if err := p.eat("["); err != nil {
			return nil, err
		}
		end := strings.IndexByte(p.s[p.pos:], ']')
		if end < 0 {
			return nil, fmt.Errorf("unclosed range")
		}
		w, err := time.ParseDuration(p.s[p.pos : p.pos+end])
		if err != nil {
			return nil, err
		}
		p.pos += end + 1
		return rangeCall{fn: name, sel: sel, window: w}, p.eat(")")
	case "histogram_quantile":
		if err := p.eat("("); err != nil {
			return nil, err
		}
		q, err := p.number()
		if err != nil {
			return nil, err
		}
		if err := p.eat(","); err != nil {
			return nil, err
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		return quantileCall{q: q, expr: e}, p.eat(")")
	}
	return p.selector(name)
}

func (p *parser) selector(name string) (selector, error) {
	sel := selector{name: name}
	if name == "" {
		return sel, fmt.Errorf("metric name expected")
	}
	if !p.peek("{") {
		return sel, nil
	}
	p.pos++
	for !p.peek("}") {
		m := matcher{label: p.ident()}
		p.space()
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(p.s[p.pos:], op) {
				m.op = op
				p.pos += len(op)
				break
			}
		}
		if m.label == "" || m.op == "" {
			return sel, fmt.Errorf("bad matcher")
		}
		p.space()
		if p.pos >= len(p.s) || p.s[p.pos] != '"' {
			return sel, fmt.Errorf("matcher value must be quoted")
		}
		end := strings.IndexByte(p.s[p.pos+1:], '"')
		if end < 0 {
			return sel, fmt.Errorf("unclosed string")
		}
		m.value = p.s[p.pos+1 : p.pos+1+end]
		p.pos += end + 2
		if strings.HasPrefix(m.value, "$") {
			v, ok := p.vars[m.value[1:]]
			if !ok {
				return sel, fmt.Errorf("unknown variable %s", m.value)
			}
			m.value = v
		}
		if m.op == "=~" || m.op == "!~" {
			re, err := regexp.Compile("^(?:" + m.value + ")$")
			if err != nil {
				return sel, err
			}
			m.re = re
		}
		sel.matchers = append(sel.matchers, m)
		if p.peek(",") {
			p.pos++
		}
	}
	p.pos++
	return sel, nil
}

// MetricNames lists the series names n reads.
func MetricNames(n node) []string {
	var out []string
	var walk func(node)
	walk = func(n node) {
		switch x := n.(type) {
		case selector:
			out = append(out, x.name)
		case rangeCall:
			out = append(out, x.sel.name)
		case quantileCall:
			walk(x.expr)
		case aggregation:
			walk(x.expr)
		case binary:
			walk(x.left)
			walk(x.right)
		}
	}
	walk(n)
	return out
}

// Sample is one series' value in one scrape.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Scrape is the series of one /metrics read: name -> samples. Histograms
// appear as name_bucket (with le), name_sum and name_count, as in the text
// format.
type Scrape struct {
	At     time.Time
	Series map[string][]Sample
}

// point is one element of an instant vector.
type point struct {
	labels map[string]string
	value  float64
}

// eval evaluates n at scrapes[i] (the scrapes in time order).
func eval(n node, scrapes []Scrape, i int) ([]point, error) {
	switch x := n.(type) {
	case numberNode:
		return []point{{labels: map[string]string{}, value: float64(x)}}, nil
	case timeNode:
		return []point{{labels: map[string]string{}, value: float64(scrapes[i].At.UnixMilli()) / 1000}}, nil
	case selector:
		var out []point
		for _, s := range scrapes[i].Series[x.name] {
			if x.matches(s.Labels) {
				out = append(out, point{labels: s.Labels, value: s.Value})
			}
		}
		return out, nil
	case rangeCall:
		var out []point
		now := scrapes[i].At
		for _, s := range scrapes[i].Series[x.sel.name] {
			if !x.sel.matches(s.Labels) {
				continue
			}
			// The oldest sample of the series within the window.
			var first *Sample
			var firstAt time.Time
			for j := 0; j < i; j++ {
				if now.Sub(scrapes[j].At) > x.window {
					continue
				}
				if v, ok := find(scrapes[j].Series[x.sel.name], s.Labels); ok {
					first, firstAt = &v, scrapes[j].At
					break
				}
			}
			if first == nil {
				continue
			}
			delta := s.Value - first.Value
			if delta < 0 {
				delta = s.Value // a counter reset
			}
			if x.fn == "rate" {
				delta /= now.Sub(firstAt).Seconds()
			}
			out = append(out, point{labels: s.Labels, value: delta})
		}
		return out, nil
	case aggregation:
		in, err := eval(x.expr, scrapes, i)
		if err != nil {
			return nil, err
		}
		groups := map[string]*point{}
		var keys []string
		for _, p := range in {
			l := map[string]string{}
			for _, b := range x.by {
				if v, ok := p.labels[b]; ok {
					l[b] = v
				}
			}
			k := key(l)
			g, ok := groups[k]
			if !ok {
				g = &point{labels: l, value: p.value}
				groups[k] = g
				keys = append(keys, k)
				continue
			}
			if x.op == "sum" {
				g.value += p.value
			} else {
				g.value = math.Max(g.value, p.value)
			}
		}
		sort.Strings(keys)
		out := make([]point, 0, len(keys))
		for _, k := range keys {
			out = append(out, *groups[k])
		}
		return out, nil
	case quantileCall:
		in, err := eval(x.expr, scrapes, i)
		if err != nil {
			return nil, err
		}
		type bucket struct{ le, count float64 }
		groups := map[string][]bucket{}
		labels := map[string]map[string]string{}
		for _, p := range in {
			le, err := strconv.ParseFloat(p.labels["le"], 64)
			if err != nil {
				return nil, fmt.Errorf("histogram_quantile over a series without le")
			}
			l := map[string]string{}
			for k, v := range p.labels {
				if k != "le" {
					l[k] = v
				}
			}
			k := key(l)
			groups[k] = append(groups[k], bucket{le, p.value})
			labels[k] = l
		}
		var out []point
		for k, bs := range groups {
			sort.Slice(bs, func(a, b int) bool { return bs[a].le < bs[b].le })
			total := bs[len(bs)-1].count
			if total <= 0 {
				continue
			}
			rank := x.q * total
			prevLe, prevCount := 0.0, 0.0
			v := math.NaN()
			for _, b := range bs {
				if b.count >= rank {
					if math.IsInf(b.le, 1) {
						v = prevLe
					} else {
						v = prevLe + (b.le-prevLe)*(rank-prevCount)/math.Max(b.count-prevCount, 1e-12)
					}
					break
				}
				prevLe, prevCount = b.le, b.count
			}
			out = append(out, point{labels: labels[k], value: v})
		}
		sort.Slice(out, func(a, b int) bool { return key(out[a].labels) < key(out[b].labels) })
		return out, nil
	case binary:
		l, err := eval(x.left, scrapes, i)
		if err != nil {
			return nil, err
		}
		r, err := eval(x.right, scrapes, i)
		if err != nil {
			return nil, err
		}
		// One side is a scalar (a number or time()): apply it to every
		// element of the other.
		apply := func(a, b float64) float64 {
			if x.op == '-' {
				return a - b
			}
			return a / b
		}
		switch {
		case isScalar(x.right) && len(r) == 1:
			for j := range l {
				l[j].value = apply(l[j].value, r[0].value)
			}
			return l, nil
		case isScalar(x.left) && len(l) == 1:
			for j := range r {
				r[j].value = apply(l[0].value, r[j].value)
			}
			return r, nil
		}
		return nil, fmt.Errorf("binary operator between two vectors is not supported")
	}
	return nil, fmt.Errorf("unknown node %T", n)
}

func isScalar(n node) bool {
	switch n.(type) {
	case numberNode, timeNode:
		return true
	}
	return false
}

func (s selector) matches(l map[string]string) bool {
	for _, m := range s.matchers {
		if !m.matches(l[m.label]) {
			return false
		}
	}
	return true
}

func find(samples []Sample, labels map[string]string) (Sample, bool) {
	k := key(labels)
	for _, s := range samples {
		if key(s.Labels) == k {
			return s, true
		}
	}
	return Sample{}, false
}

func key(l map[string]string) string {
	ks := make([]string, 0, len(l))
	for k := range l {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
		b.WriteByte(0)
	}
	return b.String()
}
