package dashtest

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

var promqlParser = parser.NewParser(parser.Options{})

// ParseExpr parses a PromQL expression (variables already substituted).
func ParseExpr(expr string) (parser.Expr, error) { return promqlParser.ParseExpr(expr) }

// Selectors returns every vector selector of e (those inside range
// selectors included), in order.
func Selectors(e parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// MetricName returns the metric name a selector selects, or "" when it
// selects by a regex on __name__ or not at all.
func MetricName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// SelectorString renders a selector without offset or @ modifiers, for the
// series API.
func SelectorString(vs *parser.VectorSelector) string {
	var ms []string
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		ms = append(ms, m.String())
	}
	return MetricName(vs) + "{" + strings.Join(ms, ",") + "}"
}

// labelSet is the set of labels a query's result series may carry; all
// means unknown (any label).
type labelSet struct {
	all    bool
	labels map[string]bool
}

func setOf(ls ...string) labelSet {
	s := labelSet{labels: map[string]bool{}}
	for _, l := range ls {
		s.labels[l] = true
	}
	return s
}

func (s labelSet) has(l string) bool { return s.all || s.labels[l] }

func (s labelSet) without(ls ...string) labelSet {
	out := labelSet{all: s.all, labels: map[string]bool{}}
	for l := range s.labels {
		out.labels[l] = true
	}
	for _, l := range ls {
		delete(out.labels, l)
	}
	return out
}

func (s labelSet) union(o labelSet) labelSet {
	out := s.without()
	out.all = s.all || o.all
	for l := range o.labels {
		out.labels[l] = true
	}
	return out
}

func (s labelSet) sorted() []string {
	var out []string
	for l := range s.labels {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// Analysis is what the static checks found in one expression.
type Analysis struct {
	// Problems are the expression's faults against the registry.
	Problems []string
	// Output are the labels the result series may carry.
	Output labelSet
}

// Analyze checks every selector, aggregation and function of e against
// the registry and computes the labels its result carries.
func Analyze(e parser.Expr, reg *Registry) Analysis {
	a := &analyzer{reg: reg}
	out := a.labels(e)
	return Analysis{Problems: a.problems, Output: out}
}

type analyzer struct {
	reg      *Registry
	problems []string
}

func (a *analyzer) errorf(format string, args ...any) {
	a.problems = append(a.problems, fmt.Sprintf(format, args...))
}

// selector checks a selector and returns its labels.
func (a *analyzer) selector(vs *parser.VectorSelector) (labelSet, Series, bool) {
	name := MetricName(vs)
	if name == "" {
		a.errorf("selector %s does not name one metric", vs)
		return labelSet{all: true}, Series{}, false
	}
	s, ok := a.reg.Lookup(name)
	if !ok {
		a.errorf("metric %s is not in the registry of emitted metrics (metrics.json)", name)
		return labelSet{all: true}, Series{}, false
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if !a.reg.HasLabel(s, m.Name) {
			a.errorf("%s has no label %q (registry labels: %s)", name, m.Name, strings.Join(a.reg.Labels(s), ", "))
		}
	}
	return setOf(a.reg.Labels(s)...), s, true
}

var counterFuncs = map[string]bool{"rate": true, "irate": true, "increase": true, "resets": true}

func (a *analyzer) labels(e parser.Expr) labelSet {
	switch n := e.(type) {
	case *parser.NumberLiteral, *parser.StringLiteral:
		return setOf()
	case *parser.VectorSelector:
		ls, _, _ := a.selector(n)
		return ls
	case *parser.MatrixSelector:
		return a.labels(n.VectorSelector)
	case *parser.ParenExpr:
		return a.labels(n.Expr)
	case *parser.UnaryExpr:
		return a.labels(n.Expr)
	case *parser.StepInvariantExpr:
		return a.labels(n.Expr)
	case *parser.SubqueryExpr:
		return a.labels(n.Expr)
	case *parser.AggregateExpr:
		inner := a.labels(n.Expr)
		if n.Param != nil {
			a.labels(n.Param)
		}
		switch n.Op {
		case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO:
			return inner
		}
		if n.Without {
			return inner.without(n.Grouping...)
		}
		for _, g := range n.Grouping {
			if !inner.has(g) {
				a.errorf("%s by (%s): no series under it carries %q", n.Op, strings.Join(n.Grouping, ", "), g)
			}
		}
		out := setOf(n.Grouping...)
		if n.Op == parser.COUNT_VALUES {
			if s, ok := n.Param.(*parser.StringLiteral); ok {
				out.labels[s.Val] = true
			}
		}
		return out
	case *parser.Call:
		var args []labelSet
		for _, arg := range n.Args {
			args = append(args, a.labels(arg))
		}
		name := n.Func.Name
		if counterFuncs[name] && len(n.Args) == 1 {
			if ms, ok := n.Args[0].(*parser.MatrixSelector); ok {
				if vs, ok := ms.VectorSelector.(*parser.VectorSelector); ok {
					if s, ok := a.reg.Lookup(MetricName(vs)); ok && !s.Counts() {
						a.errorf("%s() of %s, a %s: use a counter, or a *_over_time function for a gauge", name, MetricName(vs), s.Metric.Type)
					}
				}
			}
		}
		switch name {
		case "vector", "time", "pi", "scalar":
			return setOf()
		case "histogram_quantile":
			if len(args) == 2 {
				if !args[1].has("le") {
					a.errorf("histogram_quantile over series without an le label (aggregate with by (le, ...))")
				}
				return args[1].without("le")
			}
		case "label_replace", "label_join":
			if len(args) > 0 && len(n.Args) > 1 {
				if s, ok := n.Args[1].(*parser.StringLiteral); ok {
					return args[0].union(setOf(s.Val))
				}
			}
		}
		if len(args) > 0 {
			return args[0]
		}
		return setOf()
	case *parser.BinaryExpr:
		lhs, rhs := a.labels(n.LHS), a.labels(n.RHS)
		switch n.Op {
		case parser.LOR:
			return lhs.union(rhs)
		case parser.LAND, parser.LUNLESS:
			return lhs
		}
		lScalar := n.LHS.Type() == parser.ValueTypeScalar
		rScalar := n.RHS.Type() == parser.ValueTypeScalar
		switch {
		case lScalar && rScalar:
			return setOf()
		case lScalar:
			return rhs
		case rScalar:
			return lhs
		}
		vm := n.VectorMatching
		if vm != nil && vm.On {
			out := setOf(vm.MatchingLabels...)
			for _, l := range vm.MatchingLabels {
				if !lhs.has(l) && !rhs.has(l) {
					a.errorf("on (%s): neither side carries %q", strings.Join(vm.MatchingLabels, ", "), l)
				}
			}
			switch vm.Card {
			case parser.CardManyToOne:
				out = lhs.union(setOf(vm.Include...))
			case parser.CardOneToMany:
				out = rhs.union(setOf(vm.Include...))
			}
			return out
		}
		if vm != nil && len(vm.MatchingLabels) > 0 {
			return lhs.without(vm.MatchingLabels...)
		}
		return lhs
	}
	return labelSet{all: true}
}

// legendRef matches {{label}} in a legend format.
var legendRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// LegendLabels returns the labels a legend format refers to.
func LegendLabels(legend string) []string {
	var out []string
	for _, m := range legendRef.FindAllStringSubmatch(legend, -1) {
		out = append(out, m[1])
	}
	return out
}
