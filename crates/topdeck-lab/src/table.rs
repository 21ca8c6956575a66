// SPDX-License-Identifier: Apache-2.0
//! Tables and the text around them, written once and shown twice: as plain
//! text in the terminal (right-aligned columns, the first left-aligned,
//! separated like the article's `a | b | c |` tables) and as HTML in the
//! report.

/// A text table built row by row.
///
/// ```
/// let mut t = topdeck_lab::table::Table::new(["", "<1us", "max"]);
/// t.row(["socket", "0", "1967055ns"]);
/// assert_eq!(t.render(), "       | <1us |       max |\nsocket |    0 | 1967055ns |\n");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with this header row.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            rows: vec![header.into_iter().map(Into::into).collect()],
        }
    }

    /// Appends a row (short rows are padded with blanks).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// The table as text, one line per row.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &self.rows {
            for (c, w) in widths.iter().enumerate() {
                let cell = r.get(c).map_or("", String::as_str);
                if c == 0 {
                    out.push_str(&format!("{cell:<w$} |"));
                } else {
                    out.push_str(&format!(" {cell:>w$} |"));
                }
            }
            out.push('\n');
        }
        out
    }
}

impl Table {
    /// The table as an HTML `<table>`: the first row as its header, the
    /// first column as row names, columns of numbers right-aligned, and
    /// every cell on one line but in columns of long phrases.
    ///
    /// ```
    /// let mut t = topdeck_lab::table::Table::new(["", "max"]);
    /// t.row(["socket", "1967055ns"]);
    /// let html = t.html();
    /// assert!(html.contains("<th class=\"num\">max</th>"));
    /// assert!(html.contains("<th scope=\"row\">socket</th><td class=\"num\">1967055ns</td>"));
    /// ```
    pub fn html(&self) -> String {
        let Some((header, rows)) = self.rows.split_first() else {
            return String::new();
        };
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let text = |r: &[String], c: usize| r.get(c).map_or("", String::as_str).to_owned();
        let cell = |r: &[String], c: usize| escape(&text(r, c));
        let class: Vec<&str> = (0..cols)
            .map(|c| {
                if c > 0 && rows.iter().all(|r| numeric(&text(r, c))) {
                    " class=\"num\""
                } else if rows.iter().any(|r| text(r, c).chars().count() > WRAP_ABOVE) {
                    " class=\"wrap\""
                } else {
                    ""
                }
            })
            .collect();
        let mut out = String::from("<div class=\"table\"><table>\n<thead><tr>");
        for (c, class) in class.iter().enumerate() {
            out.push_str(&format!("<th{class}>{}</th>", cell(header, c)));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for r in rows {
            out.push_str("<tr>");
            for (c, class) in class.iter().enumerate() {
                if c == 0 {
                    out.push_str(&format!("<th scope=\"row\">{}</th>", cell(r, c)));
                } else {
                    out.push_str(&format!("<td{class}>{}</td>", cell(r, c)));
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
        out
    }
}

/// Characters above which a column of words may wrap in HTML.
const WRAP_ABOVE: usize = 24;

/// Whether a cell holds a number (`812ns`, `+1.5%`, `×1.02`, `2.7 [2.6–2.8]`)
/// or stands for none (`-`, empty), rather than words.
fn numeric(cell: &str) -> bool {
    cell.is_empty()
        || cell == "-"
        || cell
            .trim_start_matches(['+', '-', '×'])
            .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// One part of a [`Doc`].
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Heading(String),
    Table(Table),
}

/// An experiment's tables with the text that says what they hold, in order.
///
/// ```
/// use topdeck_lab::table::{Doc, Table};
/// let mut t = Table::new(["c", "wall"]);
/// t.row(["1", ".984"]);
/// let mut d = Doc::default();
/// d.text("`ps auxww` at increasing concurrency\n\n").heading("seconds").table(t);
/// assert_eq!(d.render(), "`ps auxww` at increasing concurrency\n\n\nseconds:\nc | wall |\n1 | .984 |\n");
/// assert!(d.html().starts_with("<p><code>ps auxww</code> at increasing concurrency</p>\n<h3>seconds</h3>"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Doc {
    blocks: Vec<Block>,
}

impl Doc {
    /// Appends text, printed as it is (say where lines and blank lines go);
    /// in HTML, blank lines separate paragraphs, lines within one flow
    /// together, and `` `code` `` is code.
    pub fn text(&mut self, text: impl Into<String>) -> &mut Self {
        self.blocks.push(Block::Text(text.into()));
        self
    }

    /// Appends the name of what follows: `\n<name>:\n` as text.
    pub fn heading(&mut self, name: impl Into<String>) -> &mut Self {
        self.blocks.push(Block::Heading(name.into()));
        self
    }

    /// Appends a table.
    pub fn table(&mut self, table: Table) -> &mut Self {
        self.blocks.push(Block::Table(table));
        self
    }

    /// The whole as plain text, for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Text(s) => out.push_str(s),
                Block::Heading(s) => out.push_str(&format!("\n{s}:\n")),
                Block::Table(t) => out.push_str(&t.render()),
            }
        }
        out
    }

    /// The whole as HTML, for the report.
    pub fn html(&self) -> String {
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Text(s) => {
                    for para in s.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
                        let lines: Vec<String> = para.lines().map(inline_code).collect();
                        out.push_str(&format!("<p>{}</p>\n", lines.join("\n")));
                    }
                }
                Block::Heading(s) => out.push_str(&format!("<h3>{}</h3>\n", inline_code(s))),
                Block::Table(t) => out.push_str(&t.html()),
            }
        }
        out
    }
}

/// `s` escaped for HTML, with each `` `span` `` as `<code>span</code>`.
fn inline_code(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    // An odd count of backticks leaves the last one as written.
    let closed = if parts.len() % 2 == 0 {
        parts.len() - 1
    } else {
        parts.len()
    };
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i >= closed {
            out.push('`');
            out.push_str(&escape(p));
        } else if i % 2 == 1 {
            out.push_str(&format!("<code>{}</code>", escape(p)));
        } else {
            out.push_str(&escape(p));
        }
    }
    out
}

/// `s` with the characters HTML gives meaning to escaped.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Nanoseconds as a short human string: `812ns`, `14.2µs`, `3.04ms`, `1.27s`.
pub fn ns(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.0}ns")
    } else if v < 1e6 {
        format!("{:.3}µs", v / 1e3)
    } else if v < 1e9 {
        format!("{:.3}ms", v / 1e6)
    } else {
        format!("{:.3}s", v / 1e9)
    }
}

/// A ratio as `×1.23`.
pub fn ratio(v: f64) -> String {
    if v.is_finite() {
        format!("×{v:.2}")
    } else {
        "-".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_the_width_of_their_widest_cell() {
        let mut t = Table::new(["c", "wall"]);
        t.row(["1", ".984"]).row(["8", "4.106"]);
        assert_eq!(t.render(), "c |  wall |\n1 |  .984 |\n8 | 4.106 |\n");
    }

    #[test]
    fn numbers_are_right_aligned_and_long_phrases_left_to_wrap() {
        let mut t = Table::new(["", "shift", "rate", "calls"]);
        t.row([
            "p50",
            "×1.02",
            "100 Hz",
            "clock_nanosleep 842, restart_syscall 1",
        ])
        .row(["max", "-", "flat out", "futex 1"]);
        let html = t.html();
        assert!(
            html.contains("<th class=\"num\">shift</th><th>rate</th><th class=\"wrap\">calls</th>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"num\">×1.02</td><td>100 Hz</td><td class=\"wrap\">clock_"),
            "{html}"
        );
        assert!(numeric("-1.62%") && numeric(".984") && numeric("2.7 [2.6–2.8]"));
        assert!(!numeric("flat out") && !numeric("within 1%"));
    }

    #[test]
    fn html_escapes_cells_and_text_and_keeps_code_spans() {
        let mut t = Table::new(["", "<1us"]);
        t.row(["a&b", "3"]);
        let html = t.html();
        assert!(html.contains("<th class=\"num\">&lt;1us</th>"), "{html}");
        assert!(html.contains("<th scope=\"row\">a&amp;b</th>"), "{html}");
        assert_eq!(
            inline_code("run `ps <x>` and `one"),
            "run <code>ps &lt;x&gt;</code> and `one"
        );
        let mut d = Doc::default();
        d.text("one\ntwo\n\nthree\n");
        assert_eq!(d.html(), "<p>one\ntwo</p>\n<p>three</p>\n");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(ns(812.0), "812ns");
        assert_eq!(ns(14_200.0), "14.200µs");
        assert_eq!(ns(3_040_000.0), "3.040ms");
        assert_eq!(ns(1.27e9), "1.270s");
    }
}
