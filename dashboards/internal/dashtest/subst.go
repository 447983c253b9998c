package dashtest

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// varRef matches Grafana's variable syntaxes: $name, [[name]] or
// [[name:format]], ${name} or ${name:format}.
var varRef = regexp.MustCompile(`\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^}]+))?\}`)

// AllMode says what "All" stands for when a variable has no chosen value.
type AllMode int

const (
	// AllValue is the variable's custom all value (.* here) when it has
	// one: what Grafana sends for "All" then.
	AllValue AllMode = iota
	// AllExplicit is every value of the variable as a regex alternation,
	// (a|b|c): what Grafana sends for "All" without a custom all value, and
	// for a multi-selection of every value. Unlike .*, it does not match
	// series that lack the label.
	AllExplicit
)

func (m AllMode) String() string {
	if m == AllExplicit {
		return "All=(every value)"
	}
	return "All=allValue"
}

// Env is what the variables of a dashboard stand for.
type Env struct {
	RateInterval time.Duration // $__rate_interval
	Interval     time.Duration // $__interval
	Range        time.Duration // $__range
	// Values are chosen values per variable; a variable without an entry
	// is "All".
	Values map[string][]string
	// All says what "All" stands for.
	All AllMode
	// Options are every value of each variable (the variable query's
	// result), needed for AllExplicit.
	Options map[string][]string
}

// StaticEnv is the environment of the static checks: Grafana's default
// intervals for a 6h range, and every variable "All" as its all value.
func StaticEnv() Env {
	return Env{RateInterval: time.Minute, Interval: 15 * time.Second, Range: 6 * time.Hour}
}

// References returns the names of the variables expr refers to, builtins
// included, in order of appearance.
func References(expr string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
		for _, g := range []string{m[1], m[2], m[4]} {
			if g != "" {
				out = append(out, g)
			}
		}
	}
	return out
}

func promDuration(d time.Duration) string { return model.Duration(d).String() }

// Substitute replaces every variable of expr as Grafana's Prometheus data
// source would for env.
func Substitute(expr string, d *Dashboard, env Env) (string, error) {
	var errs []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name, format := m[1], ""
		if m[2] != "" {
			name, format = m[2], m[3]
		} else if m[4] != "" {
			name, format = m[4], m[5]
		}
		switch name {
		case "__rate_interval":
			return promDuration(env.RateInterval)
		case "__rate_interval_ms":
			return fmt.Sprint(env.RateInterval.Milliseconds())
		case "__interval":
			return promDuration(env.Interval)
		case "__interval_ms":
			return fmt.Sprint(env.Interval.Milliseconds())
		case "__range":
			return promDuration(env.Range)
		case "__range_s":
			return fmt.Sprint(int64(env.Range.Seconds()))
		case "__range_ms":
			return fmt.Sprint(env.Range.Milliseconds())
		}
		v := d.Var(name)
		if v == nil {
			errs = append(errs, fmt.Sprintf("undefined variable $%s", name))
			return ref
		}
		s, err := interpolate(v, format, env)
		if err != nil {
			errs = append(errs, err.Error())
			return ref
		}
		return s
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

func interpolate(v *Variable, format string, env Env) (string, error) {
	values, chosen := env.Values[v.Name]
	if !chosen {
		if env.All == AllValue && v.IncludeAll && v.AllValue != "" {
			return v.AllValue, nil
		}
		values = env.Options[v.Name]
		if len(values) == 0 {
			if env.Options == nil {
				// Static checks: no values known; any valid regex will do.
				return ".+", nil
			}
			return "", fmt.Errorf("variable $%s has no values", v.Name)
		}
	}
	switch format {
	case "raw", "csv":
		return strings.Join(values, ","), nil
	case "", "regex", "pipe":
	default:
		return "", fmt.Errorf("variable $%s: format %q not supported by the checks", v.Name, format)
	}
	esc := make([]string, len(values))
	for i, s := range values {
		esc[i] = RegexEscape(s)
	}
	if len(esc) == 1 && !(v.Multi || v.IncludeAll) {
		return esc[0], nil
	}
	if len(esc) == 1 {
		return esc[0], nil
	}
	return "(" + strings.Join(esc, "|") + ")", nil
}

var regexSpecial = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)

// RegexEscape escapes a value for a regex label matcher inside a PromQL
// double-quoted string, as Grafana's Prometheus data source does (the
// backslash itself doubled for the string literal).
func RegexEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\\\`)
	return regexSpecial.ReplaceAllString(s, `\\$0`)
}
