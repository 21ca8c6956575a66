// SPDX-License-Identifier: Apache-2.0
//! Plain text tables: a header row and right-aligned columns, the first
//! column left-aligned, separated like the article's `a | b | c |` tables.

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
    fn durations_pick_a_unit() {
        assert_eq!(ns(812.0), "812ns");
        assert_eq!(ns(14_200.0), "14.200µs");
        assert_eq!(ns(3_040_000.0), "3.040ms");
        assert_eq!(ns(1.27e9), "1.270s");
    }
}
