//! Median and spread of a few rounds.

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

impl Summary {
    /// `None` for no values (a path that was never measured).
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
            rounds: n,
        })
    }

    /// Half the min-max range as a percentage of the median.
    pub fn spread_pct(&self) -> f64 {
        if self.median == 0.0 {
            return 0.0;
        }
        (self.max - self.min) / 2.0 / self.median.abs() * 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Summary::of(&[1.0, 2.0, 3.0, 10.0]).unwrap().median, 2.5);
        assert!(Summary::of(&[]).is_none());
        assert!((Summary::of(&[9.0, 10.0, 11.0]).unwrap().spread_pct() - 10.0).abs() < 1e-9);
    }
}
