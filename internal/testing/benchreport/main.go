// Command benchreport turns `go test -bench` output into the ratios the
// project tracks: each candidate beside the baseline that did the same work
// in the same run, as medians over -count repetitions.
//
//	go test -run '^$' -bench . -count 5 ./... | go run ./internal/benchreport -spec bench/ratios.txt
//
// A spec line is: label | candidate | baseline | metric | better | target.
// baseline "-" takes the candidate's metric itself (benchmarks that pair
// both sides internally report the ratio). better is "higher" or "lower":
// the ratio is oriented so that above 1 is better for "higher" metrics
// (throughput) and below 1 is better for "lower" metrics (time); target is
// the bound the ratio must meet. A metric whose name ends in -ms is an
// absolute difference in milliseconds (the gateway's added latency), shown
// and bounded in ms.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var procSuffix = regexp.MustCompile(`-\d+$`)

func main() {
	spec := flag.String("spec", "bench/ratios.txt", "ratio spec file")
	flag.Parse()
	samples := map[string]map[string][]float64{} // benchmark -> metric -> values
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(os.Stderr, line)
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		if samples[name] == nil {
			samples[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			samples[name][f[i+1]] = append(samples[name][f[i+1]], v)
		}
	}
	rules, err := os.ReadFile(*spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("| measure | candidate | baseline | metric | ratio | target | met |")
	fmt.Println("|---|---|---|---|---|---|---|")
	failed := false
	for _, line := range strings.Split(string(rules), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := strings.Split(line, "|")
		if len(p) != 6 {
			fmt.Fprintf(os.Stderr, "benchreport: bad spec line %q\n", line)
			os.Exit(2)
		}
		for i := range p {
			p[i] = strings.TrimSpace(p[i])
		}
		label, cand, base, metric, better := p[0], p[1], p[2], p[3], p[4]
		target, err := strconv.ParseFloat(p[5], 64)
		if err != nil && p[5] != "-" {
			fmt.Fprintf(os.Stderr, "benchreport: bad target %q in %q\n", p[5], line)
			os.Exit(2)
		}
		c, okc := median(samples[cand][metric])
		if !okc {
			fmt.Printf("| %s | (no %s in %s) | | | | | no |\n", label, metric, cand)
			failed = true
			continue
		}
		ratio, bstr := c, "(paired)"
		if base != "-" {
			b, okb := median(samples[base][metric])
			if !okb || b == 0 {
				fmt.Printf("| %s | %.4g | (no %s in %s) | | | | no |\n", label, c, metric, base)
				failed = true
				continue
			}
			ratio, bstr = c/b, strconv.FormatFloat(b, 'g', 4, 64)
		}
		if p[5] == "-" && strings.HasSuffix(metric, "-ms") { // informational, in ms
			fmt.Printf("| %s | %.3g ms | %s | %s (median of %d) | %.3f ms | - | - |\n", label, c, bstr, metric, len(samples[cand][metric]), ratio)
			continue
		}
		if p[5] == "-" { // informational: no bound
			fmt.Printf("| %s | %.4g | %s | %s (median of %d) | %.3fx | - | - |\n", label, c, bstr, metric, len(samples[cand][metric]), ratio)
			continue
		}
		met := (better == "higher" && ratio >= target) || (better == "lower" && ratio <= target)
		cmp := ">="
		if better == "lower" {
			cmp = "<="
		}
		if strings.HasSuffix(metric, "-ms") { // an absolute difference, not a ratio
			fmt.Printf("| %s | %.3g ms | %s | %s (median of %d) | %.3f ms | %s %g ms | %s |\n", label, c, bstr, metric, len(samples[cand][metric]), ratio, cmp, target, yesNo(met))
			continue
		}
		fmt.Printf("| %s | %.4g | %s | %s (median of %d) | %.3fx | %s %.2fx | %s |\n", label, c, bstr, metric, len(samples[cand][metric]), ratio, cmp, target, yesNo(met))
	}
	if failed {
		os.Exit(1)
	}
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
