//! Stands in for `metrics` without the `prometheus` feature: a queue's metrics are an
//! `Option` of a type with no values, so every update the queue makes is compiled out.

use std::time::Duration;

/// No queue has metrics without the `prometheus` feature.
pub(crate) enum QueueMetrics {}

impl QueueMetrics {
    pub(crate) fn added(&self) {
        match *self {}
    }

    pub(crate) fn taken(&self, _waited: Duration) {
        match *self {}
    }

    pub(crate) fn finished(&self, _worked: Duration) {
        match *self {}
    }

    pub(crate) fn retried(&self) {
        match *self {}
    }
}
