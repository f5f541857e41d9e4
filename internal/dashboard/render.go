package dashboard

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Geometry and colours of the picture: Grafana's dark theme and its
// classic palette, on its 24-column grid.
const (
	width     = 1600.0
	rowUnit   = 30.0
	gap       = 6.0
	headerH   = 56.0
	bgColour  = "#111217"
	panelBg   = "#181b1f"
	border    = "#2c3235"
	textColor = "#ccccdc"
	dimText   = "#8e8e9e"
)

var palette = []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#37872d", "#c4162a"}

// Render draws the dashboard's panels with the values its queries take over
// scrapes, as an SVG document. note is printed under the title (how the
// picture was made).
func Render(d *Dashboard, scrapes []Scrape, note string) ([]byte, error) {
	if len(scrapes) < 2 {
		return nil, fmt.Errorf("need at least two scrapes, have %d", len(scrapes))
	}
	maxY := 0
	for _, p := range d.Panels {
		maxY = max(maxY, p.GridPos.Y+p.GridPos.H)
	}
	height := headerH + float64(maxY)*rowUnit + gap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Inter, Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="%s"/>`+"\n", bgColour)
	fmt.Fprintf(&b, `<text x="12" y="26" fill="%s" font-size="20" font-weight="600">%s</text>`+"\n", textColor, html.EscapeString(d.Title))
	fmt.Fprintf(&b, `<text x="12" y="46" fill="%s" font-size="12">%s</text>`+"\n", dimText, html.EscapeString(note))
	span := scrapes[len(scrapes)-1].At.Sub(scrapes[0].At)
	for _, p := range d.Panels {
		x := p.GridPos.X * int(width) / 24
		px := float64(x) + gap/2
		py := headerH + float64(p.GridPos.Y)*rowUnit
		pw := float64(p.GridPos.W)*width/24 - gap
		ph := float64(p.GridPos.H)*rowUnit - gap
		if p.Type == "row" {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="15" font-weight="600">%s</text>`+"\n", px+4, py+20, textColor, html.EscapeString(p.Title))
			continue
		}
		lines, err := p.Evaluate(scrapes)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, `<g><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="3" fill="%s" stroke="%s"/>`+"\n", px, py, pw, ph, panelBg, border)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" font-size="13" font-weight="500">%s</text>`+"\n", px+8, py+18, textColor, html.EscapeString(p.Title))
		drawSeries(&b, lines, p.FieldConfig.Defaults.Unit, px, py, pw, ph, span.Seconds())
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return []byte(b.String()), nil
}

// drawSeries plots lines inside the panel box, with a y axis, the time
// span and a legend.
func drawSeries(b *strings.Builder, lines []Line, unit string, px, py, pw, ph, seconds float64) {
	var data []Line
	for _, l := range lines {
		for _, v := range l.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				data = append(data, l)
				break
			}
		}
	}
	legendRows := legendLayout(data, pw-16)
	plotX, plotY := px+58, py+28
	plotW, plotH := pw-58-10, ph-28-18-float64(len(legendRows))*16
	if len(data) == 0 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" font-size="13" text-anchor="middle">No data</text>`+"\n", px+pw/2, py+ph/2, dimText)
		return
	}
	lo, hi := 0.0, 0.0
	for _, l := range data {
		for _, v := range l.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	hi += (hi - lo) * 0.1
	for i := 0; i <= 2; i++ {
		v := lo + (hi-lo)*float64(i)/2
		y := plotY + plotH - plotH*float64(i)/2
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", plotX, y, plotX+plotW, y, border)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" font-size="11" text-anchor="end">%s</text>`+"\n", plotX-6, y+4, dimText, format(v, unit))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" font-size="11">-%.0fs</text>`+"\n", plotX, plotY+plotH+13, dimText, seconds)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" font-size="11" text-anchor="end">now</text>`+"\n", plotX+plotW, plotY+plotH+13, dimText)
	for i, l := range data {
		colour := palette[i%len(palette)]
		var path strings.Builder
		pen := false
		n := len(l.Values)
		for j, v := range l.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				pen = false
				continue
			}
			x := plotX + plotW*float64(j)/float64(max(n-1, 1))
			y := plotY + plotH - plotH*(v-lo)/(hi-lo)
			if pen {
				fmt.Fprintf(&path, " L%.1f %.1f", x, y)
			} else {
				fmt.Fprintf(&path, " M%.1f %.1f", x, y)
				pen = true
			}
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`+"\n", strings.TrimSpace(path.String()), colour)
	}
	y := plotY + plotH + 30
	i := 0
	for _, row := range legendRows {
		x := px + 10
		for _, w := range row {
			colour := palette[i%len(palette)]
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="3" fill="%s"/>`+"\n", x, y-5, colour)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" font-size="11">%s</text>`+"\n", x+16, y, textColor, html.EscapeString(data[i].Legend))
			x += w
			i++
		}
		y += 16
	}
}

// legendLayout wraps the legend entries into rows of at most width pixels;
// each row holds the widths of its entries.
func legendLayout(lines []Line, width float64) [][]float64 {
	var rows [][]float64
	var row []float64
	used := 0.0
	for _, l := range lines {
		w := 16 + 6.5*float64(len(l.Legend)) + 14
		if used+w > width && len(row) > 0 {
			rows = append(rows, row)
			row, used = nil, 0
		}
		row = append(row, w)
		used += w
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

// format writes v in the panel's unit.
func format(v float64, unit string) string {
	switch unit {
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0"
		case a < 1e-3:
			return fmt.Sprintf("%.0fµs", v*1e6)
		case a < 1:
			return fmt.Sprintf("%.0fms", v*1e3)
		}
		return fmt.Sprintf("%.1fs", v)
	case "bytes":
		for _, u := range []struct {
			div  float64
			name string
		}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
			if math.Abs(v) >= u.div {
				return fmt.Sprintf("%.0f %s", v/u.div, u.name)
			}
		}
		return fmt.Sprintf("%.0f B", v)
	case "ops":
		return si(v) + "/s"
	}
	return si(v)
}

func si(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 10 || a == 0:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
