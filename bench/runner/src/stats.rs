//! Samples and the report rows built from them.

use serde::Serialize;

/// Several measurements of one figure.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// Every round's value, in run order.
    pub values: Vec<f64>,
}

impl Sample {
    /// Adds one round's value.
    pub fn push(&mut self, v: f64) {
        self.values.push(v);
    }
    /// Smallest value (NaN when empty).
    pub fn min(&self) -> f64 {
        self.values.iter().copied().fold(f64::NAN, f64::min)
    }
    /// Median (NaN when empty).
    pub fn median(&self) -> f64 {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
}

/// One line of the report: a figure of Tern next to its reference, same run.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What is measured.
    pub measure: String,
    /// Unit of every number of the row.
    pub unit: String,
    /// Tern's side.
    pub tern: Sample,
    /// The reference's name (empty when none).
    pub reference: String,
    /// The reference's side (empty when none).
    pub reference_sample: Sample,
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The rows as a markdown table (min / median of each side).
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| measure | unit | Tern min | Tern median | reference | ref min | ref median | rounds |\n| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.measure,
            r.unit,
            fmt(r.tern.min()),
            fmt(r.tern.median()),
            if r.reference.is_empty() {
                "-"
            } else {
                &r.reference
            },
            fmt(r.reference_sample.min()),
            fmt(r.reference_sample.median()),
            r.tern.values.len()
        ));
    }
    s
}
