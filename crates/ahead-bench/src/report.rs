//! Tables and SVG plots.

use std::fmt::Write;

/// A text table with right-aligned numeric columns.
#[derive(Clone, Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, columns padded.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                let numeric = c
                    .chars()
                    .next()
                    .is_some_and(|ch| ch.is_ascii_digit() || ch == '-');
                if i > 0 {
                    out.push_str("  ");
                }
                if numeric && i > 0 {
                    let _ = write!(out, "{c:>w$}");
                } else {
                    let _ = write!(out, "{c:<w$}");
                }
            }
            while out.ends_with(' ') {
                out.pop();
            }
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

const COLORS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];
const W: f64 = 800.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn frame(title: &str, y_label: &str, y_max: f64, out: &mut String) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>
"#,
        (W - RIGHT + LEFT) / 2.0,
        escape(title)
    );
    let plot_h = H - TOP - BOTTOM;
    for k in 0..=5 {
        let v = y_max * k as f64 / 5.0;
        let y = TOP + plot_h - plot_h * k as f64 / 5.0;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            trim(v)
        );
    }
    let _ = writeln!(
        out,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
}

fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn legend(names: &[String], out: &mut String) {
    for (i, n) in names.iter().enumerate() {
        let y = TOP + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - RIGHT + 15.0,
            y - 10.0,
            COLORS[i % COLORS.len()],
            W - RIGHT + 32.0,
            y,
            escape(n)
        );
    }
}

/// The median of `v` (the upper one of an even count, so it is always a
/// value that was measured), or None for no values. The one median of
/// every benchmark table.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    percentile(&mut v, 0.5)
}

/// The `q` quantile (0 to 1) of `v`, which it sorts: the value of rank
/// `(n - 1) q` rounded to the nearest (half up), so always a value that
/// was measured; None for no values. The one percentile of every
/// benchmark table (latencies' p50 and p99; [`median`] is its 0.5).
pub fn percentile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[((v.len() - 1) as f64 * q).round() as usize])
}

/// A grouped bar chart: one group per category, one bar per series.
/// `values[s][c]` is series `s` in category `c`.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[String],
    values: &[Vec<f64>],
) -> String {
    let y_max = nice_max(values.iter().flatten().cloned().fold(0.0, f64::max));
    let mut out = String::new();
    frame(title, y_label, y_max, &mut out);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let group = plot_w / categories.len().max(1) as f64;
    let bar = group * 0.8 / series.len().max(1) as f64;
    for (c, cat) in categories.iter().enumerate() {
        let x0 = LEFT + group * c as f64 + group * 0.1;
        for (s, vals) in values.iter().enumerate() {
            let v = vals.get(c).copied().unwrap_or(0.0);
            let h = plot_h * v / y_max;
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {:.1}</title></rect>"#,
                x0 + bar * s as f64,
                TOP + plot_h - h,
                bar * 0.95,
                h,
                COLORS[s % COLORS.len()],
                escape(&series[s]),
                escape(cat),
                v
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + group * 0.4,
            TOP + plot_h + 18.0,
            escape(cat)
        );
    }
    legend(series, &mut out);
    out.push_str("</svg>\n");
    out
}

/// A line chart over `x = 0, 1, 2, ...` (one point per unit of `x_label`).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[String],
    values: &[Vec<f64>],
) -> String {
    let y_max = nice_max(values.iter().flatten().cloned().fold(0.0, f64::max));
    let n = values.iter().map(Vec::len).max().unwrap_or(0).max(2);
    let mut out = String::new();
    frame(title, y_label, y_max, &mut out);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let x_max = nice_max((n - 1) as f64);
    for k in 0..=5 {
        let v = x_max * k as f64 / 5.0;
        let x = LEFT + plot_w * k as f64 / 5.0;
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + plot_h + 18.0,
            trim(v)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        H - 15.0,
        escape(x_label)
    );
    for (s, vals) in values.iter().enumerate() {
        let mut pts = String::new();
        for (i, v) in vals.iter().enumerate() {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                LEFT + plot_w * i as f64 / x_max,
                TOP + plot_h - plot_h * v / y_max
            );
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            COLORS[s % COLORS.len()],
            pts.trim_end()
        );
    }
    legend(series, &mut out);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1.5".into()]);
        t.row(vec!["longer".into(), "100.25".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "name    value");
        assert_eq!(lines[2], "a          1.5");
        assert_eq!(lines[3], "longer  100.25");
    }

    #[test]
    fn charts_are_svg_with_one_mark_per_value() {
        let s = bar_chart(
            "t",
            "MB/s",
            &["a".into(), "b".into()],
            &["x".into(), "y".into()],
            &[vec![1.0, 2.0], vec![3.0, 4.0]],
        );
        assert!(s.starts_with("<svg"));
        assert_eq!(s.matches("<title>").count(), 4);
        let l = line_chart("t", "s", "MB/s", &["x".into()], &[vec![1.0, 5.0, 2.0]]);
        assert_eq!(l.matches("<polyline").count(), 1);
        assert!(l.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn escapes_text() {
        let s = bar_chart("a<b", "y", &["&".into()], &["s".into()], &[vec![1.0]]);
        assert!(s.contains("a&lt;b") && s.contains("&amp;"));
    }

    #[test]
    fn the_median_is_a_measured_value() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(vec![f64::NAN, 1.0, 2.0]), Some(2.0));
    }
}
