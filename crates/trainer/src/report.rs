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
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let group_w = (10 * k + 6) as f64;
    let (left, bottom) = (70.0, 150.0);
    let axis = LogAxis::of(series, 40.0, 320.0);
    let plot_right = left + group_w * n as f64;
    let width = plot_right + 160.0;
    let height = axis.top + axis.plot_h + bottom;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{left}" y="20" font-size="14">{}</text>"#,
        esc(title)
    );
    axis.write_grid(&mut s, left, plot_right);
    let _ = write!(
        s,
        r#"<text transform="translate(16,{:.0}) rotate(-90)" text-anchor="middle">{}</text>"#,
        axis.top + axis.plot_h / 2.0,
        esc(ylabel)
    );
    for (ci, cat) in categories.iter().enumerate() {
        let gx = left + group_w * ci as f64 + 3.0;
        axis.write_group(&mut s, gx, ci, cat, series);
    }
    for (si, (name, _)) in series.iter().enumerate() {
        let lx = plot_right + 15.0;
        let ly = axis.top + 16.0 * si as f64;
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

/// The vertical log2 axis of a bar chart: whole powers of two from `lo` to
/// `hi` (at least 1/2 to 2), drawn over `plot_h` pixels from `top` down.
struct LogAxis {
    lo: f64,
    hi: f64,
    top: f64,
    plot_h: f64,
}

impl LogAxis {
    /// The axis that holds every positive finite value of `series` and 1.
    fn of(series: &[(String, Vec<f64>)], top: f64, plot_h: f64) -> LogAxis {
        let (min, max) = series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((1.0f64, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        LogAxis {
            lo: min.log2().floor().min(-1.0),
            hi: max.log2().ceil().max(1.0),
            top,
            plot_h,
        }
    }

    /// The height of value `v`.
    fn y(&self, v: f64) -> f64 {
        self.top + self.plot_h * (1.0 - (v.max(1e-12).log2() - self.lo) / (self.hi - self.lo))
    }

    /// A labelled grid line at each power of two, the one at 1 darker.
    fn write_grid(&self, s: &mut String, left: f64, right: f64) {
        for e in self.lo as i32..=self.hi as i32 {
            let v = 2f64.powi(e);
            let yy = self.y(v);
            let _ = write!(
                s,
                r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="{}" stroke-width="{}"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                right,
                if e == 0 { "#000" } else { "#ddd" },
                if e == 0 { 1.5 } else { 0.5 },
                left - 4.0,
                yy + 4.0,
                if e >= 0 {
                    format!("{}", v as u64)
                } else {
                    format!("1/{}", (1.0 / v) as u64)
                }
            );
        }
    }

    /// The bars of category `ci` (from 1 to each series' value, those that
    /// are positive and finite) at `gx`, and the category's slanted label.
    fn write_group(
        &self,
        s: &mut String,
        gx: f64,
        ci: usize,
        cat: &str,
        series: &[(String, Vec<f64>)],
    ) {
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
