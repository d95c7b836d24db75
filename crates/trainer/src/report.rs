//! Plain SVG charts for the evaluation report (no plotting dependency): grouped
//! bar charts on a log scale and confusion-matrix heat maps.

use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const COLORS: [&str; 6] = [
    "#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377",
];

/// A grouped bar chart of positive values on a log2 axis with a reference line at 1.
/// `series` are (name, one value per category).
pub fn bar_chart(
    title: &str,
    ylabel: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let f = Frame::new(categories.len().max(1), series);
    let (width, height) = (f.right() + 160.0, f.top + f.plot_h + 150.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="20" font-size="14">{}</text>"#,
        f.left,
        esc(title)
    );
    f.grid(&mut s);
    let _ = write!(
        s,
        r#"<text transform="translate(16,{:.0}) rotate(-90)" text-anchor="middle">{}</text>"#,
        f.top + f.plot_h / 2.0,
        esc(ylabel)
    );
    for (ci, cat) in categories.iter().enumerate() {
        f.bars(&mut s, ci, cat, series);
    }
    for (si, (name, _)) in series.iter().enumerate() {
        let lx = f.right() + 15.0;
        let ly = f.top + 16.0 * si as f64;
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly,
            COLORS[si % COLORS.len()],
            lx + 14.0,
            ly + 9.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The plot area of a bar chart and its log2 value range.
struct Frame {
    left: f64,
    top: f64,
    plot_h: f64,
    /// Width of one category's group of bars.
    group_w: f64,
    /// Categories.
    n: usize,
    /// The axis from 2^lo to 2^hi (always spanning 1/2 .. 2).
    lo: f64,
    hi: f64,
}

impl Frame {
    fn new(n: usize, series: &[(String, Vec<f64>)]) -> Frame {
        let vals: Vec<f64> = series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let lo = vals.iter().copied().fold(1.0f64, f64::min).log2().floor();
        let hi = vals.iter().copied().fold(1.0f64, f64::max).log2().ceil();
        Frame {
            left: 70.0,
            top: 40.0,
            plot_h: 320.0,
            group_w: (10 * series.len().max(1) + 6) as f64,
            n,
            lo: lo.min(-1.0),
            hi: hi.max(1.0),
        }
    }

    /// The right end of the plot area.
    fn right(&self) -> f64 {
        self.left + self.group_w * self.n as f64
    }

    /// The y coordinate of a value.
    fn y(&self, v: f64) -> f64 {
        self.top + self.plot_h * (1.0 - (v.max(1e-12).log2() - self.lo) / (self.hi - self.lo))
    }

    /// A grid line and label per power of two, the line at 1 darker.
    fn grid(&self, s: &mut String) {
        for e in self.lo as i32..=self.hi as i32 {
            let v = 2f64.powi(e);
            let yy = self.y(v);
            let _ = write!(
                s,
                r##"<line x1="{}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="{}" stroke-width="{}"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                self.left,
                self.right(),
                if e == 0 { "#000" } else { "#ddd" },
                if e == 0 { 1.5 } else { 0.5 },
                self.left - 4.0,
                yy + 4.0,
                if e >= 0 {
                    format!("{}", v as u64)
                } else {
                    format!("1/{}", (1.0 / v) as u64)
                }
            );
        }
    }

    /// The bars of category `ci` (one per series with a positive value) and its label.
    fn bars(&self, s: &mut String, ci: usize, cat: &str, series: &[(String, Vec<f64>)]) {
        let gx = self.left + self.group_w * ci as f64 + 3.0;
        for (si, (_, v)) in series.iter().enumerate() {
            let val = v.get(ci).copied().unwrap_or(f64::NAN);
            if !(val.is_finite() && val > 0.0) {
                continue;
            }
            let (y0, y1) = (self.y(1.0), self.y(val));
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="9" height="{:.1}" fill="{}"><title>{}: {:.3}</title></rect>"#,
                gx + 10.0 * si as f64,
                y0.min(y1),
                (y1 - y0).abs().max(0.5),
                COLORS[si % COLORS.len()],
                esc(cat),
                val
            );
        }
        let _ = write!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(60)">{}</text>"#,
            gx + 2.0,
            self.top + self.plot_h + 8.0,
            esc(&cat.chars().take(28).collect::<String>())
        );
    }
}

/// A confusion matrix: rows are the true (best) class, columns the predicted one.
pub fn confusion(title: &str, labels: &[String], counts: &[Vec<usize>]) -> String {
    let n = labels.len();
    let cell = 26.0;
    let left = 130.0;
    let top = 130.0;
    let size = left + cell * n as f64 + 20.0;
    let max = counts.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{size:.0}" height="{:.0}" font-family="sans-serif" font-size="10">"#,
        top + cell * n as f64 + 30.0
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="10" y="16" font-size="13">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text x="{:.0}" y="34">predicted (columns) vs best (rows)</text>"#,
        left
    );
    for (i, l) in labels.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 4.0,
            top + cell * i as f64 + cell * 0.65,
            esc(l)
        );
        let _ = write!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(-60)">{}</text>"#,
            left + cell * i as f64 + cell * 0.6,
            top - 4.0,
            esc(l)
        );
    }
    for (i, row) in counts.iter().enumerate() {
        for (j, &c) in row.iter().enumerate() {
            let a = if c == 0 {
                0.0
            } else {
                0.15 + 0.85 * (c as f64 / max).sqrt()
            };
            let _ = write!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{cell}" height="{cell}" fill="{}" fill-opacity="{a:.2}" stroke="#eee"/>"##,
                left + cell * j as f64,
                top + cell * i as f64,
                if i == j { "#228833" } else { "#cc3311" }
            );
            if c > 0 {
                let _ = write!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{c}</text>"#,
                    left + cell * j as f64 + cell / 2.0,
                    top + cell * i as f64 + cell * 0.65
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_every_label() {
        let c = bar_chart(
            "t",
            "speedup",
            &["a<b".into(), "c".into()],
            &[
                ("s1".into(), vec![2.0, 0.5]),
                ("s2".into(), vec![f64::NAN, 1.0]),
            ],
        );
        assert!(c.starts_with("<svg") && c.trim_end().ends_with("</svg>"));
        assert!(c.contains("a&lt;b") && c.contains("s2"));
        let m = confusion("m", &["x".into(), "y".into()], &[vec![3, 1], vec![0, 2]]);
        assert!(m.contains(">3<") && m.contains(">2<"));
    }
}
