//! The on-demand RFC's rotating disk (docs/references.md): geometry, rotation
//! from virtual time, zero-latency full-track reads into the drive's buffer,
//! seeks by distance.

use super::*;

/// Parameters of the disk model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HddParams {
    /// Bytes per track. Calibrated so that streaming, one track per
    /// revolution plus the head switch between tracks, runs at the RFC's
    /// 62 MB/s: 566,000 B / (8.33 ms + 0.8 ms) = 62.0 MB/s.
    pub track_bytes: u64,
    /// Revolutions per minute (7200: 8.33 ms per revolution).
    pub rpm: f64,
    /// Heads (tracks per cylinder): two platters, four surfaces.
    pub heads: u64,
    /// Capacity in bytes (160 GB).
    pub capacity: u64,
    /// Seek to the next cylinder, seconds (data sheet: 1.1 ms).
    pub track_to_track: f64,
    /// Seek across the whole disk, seconds (data sheet class: 15 ms; with
    /// the square-root model this makes the average random seek 8.5 ms, the
    /// data sheet's figure).
    pub full_stroke: f64,
    /// Head switch within a cylinder, and the skew lost between two
    /// consecutive tracks when streaming, seconds.
    pub head_switch: f64,
    /// Command overhead per request, seconds.
    pub overhead: f64,
    /// Interface rate for data already in the buffer, bytes/s (SATA II:
    /// 300 MB/s).
    pub interface_rate: f64,
    /// Tracks the buffer holds (8 MB / 566 kB, rounded down).
    pub buffer_tracks: usize,
    /// Tracks the drive reads past the last request while idle.
    pub prefetch_tracks: u64,
}

impl Default for HddParams {
    fn default() -> Self {
        HddParams {
            track_bytes: 566_000,
            rpm: 7200.0,
            heads: 4,
            capacity: 160_000_000_000,
            track_to_track: 0.0011,
            full_stroke: 0.015,
            head_switch: 0.0008,
            overhead: 0.00005,
            interface_rate: 300e6,
            buffer_tracks: 14,
            prefetch_tracks: 1,
        }
    }
}

/// The disk model. See the module docs.
#[derive(Clone, Debug)]
pub struct Hdd {
    p: HddParams,
    rev: f64,
    /// Track skew in revolutions: a sequential reader crossing to the next
    /// track arrives exactly at its first sector.
    skew: f64,
    /// What the buffer holds: per track, arcs `[from, to)` of the track in
    /// fractions of it; most recently used last.
    buffer: Vec<(u64, Vec<(f64, f64)>)>,
    /// The head is reading `track` from position `from` (a fraction of the
    /// track) at time `since`, and keeps reading forward, track after track,
    /// until the end of `stop`.
    stream: Option<Stream>,
    /// Track the head is on.
    head_track: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Stream {
    track: u64,
    since: f64,
    from: f64,
    stop: u64,
}

pub(super) const EPS: f64 = 1e-9;

impl Hdd {
    /// A disk with these parameters, head on track 0, buffer empty.
    pub fn new(p: HddParams) -> Hdd {
        let rev = 60.0 / p.rpm;
        Hdd {
            rev,
            skew: p.head_switch / rev,
            p,
            buffer: Vec::new(),
            stream: None,
            head_track: 0,
        }
    }

    fn cylinders(&self) -> u64 {
        (self.p.capacity / self.p.track_bytes / self.p.heads).max(1)
    }

    fn seek_time(&self, from: u64, to: u64) -> f64 {
        let (c0, c1) = (from / self.p.heads, to / self.p.heads);
        if c0 == c1 {
            return if from == to { 0.0 } else { self.p.head_switch };
        }
        let d = c0.abs_diff(c1) as f64;
        let span = self.p.full_stroke - self.p.track_to_track;
        self.p.track_to_track + span * (d / self.cylinders() as f64).sqrt()
    }

    /// Where on `track` (fraction of the track) the head is at `time`.
    fn position(&self, track: u64, time: f64) -> f64 {
        (time / self.rev - track as f64 * self.skew).rem_euclid(1.0)
    }

    fn cover(&mut self, track: u64, from: f64, to: f64) {
        if to - from <= EPS {
            return;
        }
        let idx = match self.buffer.iter().position(|(t, _)| *t == track) {
            Some(i) => {
                let e = self.buffer.remove(i);
                self.buffer.push(e);
                self.buffer.len() - 1
            }
            None => {
                self.buffer.push((track, Vec::new()));
                if self.buffer.len() > self.p.buffer_tracks {
                    self.buffer.remove(0);
                }
                self.buffer.len() - 1
            }
        };
        let arcs = &mut self.buffer[idx].1;
        let mut add = |a: f64, b: f64| {
            arcs.push((a, b));
            arcs.sort_by(|x, y| x.0.total_cmp(&y.0));
            let mut merged: Vec<(f64, f64)> = Vec::with_capacity(arcs.len());
            for &(a, b) in arcs.iter() {
                match merged.last_mut() {
                    Some(last) if a <= last.1 + EPS => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *arcs = merged;
        };
        if to - from >= 1.0 - EPS {
            add(0.0, 1.0);
        } else {
            let (a, b) = (from.rem_euclid(1.0), from.rem_euclid(1.0) + (to - from));
            if b <= 1.0 {
                add(a, b);
            } else {
                add(a, 1.0);
                add(0.0, b - 1.0);
            }
        }
    }

    fn covered(&self, track: u64, a: f64, b: f64) -> bool {
        self.buffer
            .iter()
            .find(|(t, _)| *t == track)
            .is_some_and(|(_, arcs)| arcs.iter().any(|&(x, y)| x <= a + EPS && y >= b - EPS))
    }

    /// Advances the head's streaming to `now`: what passed under it is in
    /// the buffer; at the end of `stop` the drive idles.
    fn settle(&mut self, now: f64) {
        while let Some(s) = self.stream {
            if s.since >= now {
                return;
            }
            let end = s.since + (1.0 - s.from) * self.rev;
            if end <= now {
                self.cover(s.track, s.from, 1.0);
                self.head_track = s.track;
                if s.track >= s.stop {
                    self.stream = None;
                    return;
                }
                self.stream = Some(Stream {
                    track: s.track + 1,
                    since: end + self.p.head_switch,
                    from: 0.0,
                    stop: s.stop,
                });
            } else {
                let at = s.from + (now - s.since) / self.rev;
                self.cover(s.track, s.from, at);
                self.head_track = s.track;
                self.stream = Some(Stream {
                    since: now,
                    from: at,
                    ..s
                });
                return;
            }
        }
    }

    /// Serves the piece `[a, b)` (fractions) of `track`, starting no earlier
    /// than `t`; returns its completion time.
    pub(super) fn piece(&mut self, t: f64, track: u64, a: f64, b: f64, req_last: u64) -> f64 {
        self.settle(t);
        if self.covered(track, a, b) {
            return t + (b - a) * self.p.track_bytes as f64 / self.p.interface_rate;
        }
        if let Some(s) = self.stream {
            // The head is already reading towards this piece.
            // (What passed since `from` moved is in the buffer already.)
            let ahead_on_track = s.track == track
                && b > s.from + EPS
                && (a + EPS >= s.from || self.covered(track, a, s.from));
            let later_track =
                track > s.track && (track <= s.stop || (track == s.track + 1 && track <= req_last));
            if ahead_on_track || later_track {
                let mut arrive = s.since;
                let mut from = s.from;
                let mut cur = s.track;
                while cur < track {
                    let end = arrive + (1.0 - from) * self.rev;
                    self.cover(cur, from, 1.0);
                    arrive = end + self.p.head_switch;
                    from = 0.0;
                    cur += 1;
                }
                let done = arrive + (b - from).max(0.0) * self.rev;
                self.cover(track, from, b);
                self.stream = Some(Stream {
                    track,
                    since: done,
                    from: b,
                    stop: s.stop.max(track),
                });
                self.head_track = track;
                return done.max(t);
            }
        }
        // A mechanical access: seek, then read whatever passes under the
        // head (zero-latency read) until the piece is complete.
        let arrive = t + self.seek_time(self.head_track, track);
        let head = self.position(track, arrive);
        // Arriving inside the piece: read on to its end, then around to
        // where the head came in. Otherwise: turn to its start, read it (a
        // whole track from its start is a whole revolution, not none).
        let turn = if head > a + EPS && head < b - EPS {
            1.0
        } else {
            (a - head).rem_euclid(1.0) + (b - a)
        };
        let done = arrive + turn * self.rev;
        self.cover(track, head, head + turn);
        self.stream = Some(Stream {
            track,
            since: done,
            from: b,
            stop: track,
        });
        self.head_track = track;
        done
    }
}

impl Device for Hdd {
    fn concurrency(&self) -> usize {
        1
    }

    /// Nothing, for the requests and waits a stride makes: the drive reads
    /// whole tracks into its buffer ([`HddParams::buffer_tracks`]), so a
    /// request a short gap after the last one is served from the buffer,
    /// and reading the gap instead only costs its bytes. (A random request
    /// costs half a revolution, 4.2 ms, but no rule reads through to save
    /// one.) One request at a time.
    fn cost(&self, _page_size: u64) -> DeviceCost {
        DeviceCost {
            request_pages: 0,
            latency_pages: 0,
            parallelism: 1,
        }
    }

    fn elevator_head(&self) -> Option<u64> {
        Some(self.head_track * self.p.track_bytes)
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let tb = self.p.track_bytes;
        let mut t = now + self.p.overhead;
        let mut pos = io.offset;
        let end = io.offset + io.len.max(1);
        let req_last = (end - 1) / tb;
        let mut last = pos / tb;
        while pos < end {
            let track = pos / tb;
            let piece_end = end.min((track + 1) * tb);
            let a = (pos - track * tb) as f64 / tb as f64;
            let b = (piece_end - track * tb) as f64 / tb as f64;
            t = self.piece(t, track, a, b, req_last);
            last = track;
            pos = piece_end;
        }
        // The drive's own read-ahead: keep reading past the request, if the
        // head is where the request ended (not when the buffer served it).
        if let Some(s) = &mut self.stream {
            if s.track == last {
                s.stop = s.stop.max(last + self.p.prefetch_tracks);
            }
        }
        t
    }

    fn describe(&self) -> String {
        format!(
            "hdd: {:.0} rpm, {} B/track ({:.1} MB/s streaming), seek {:.1}-{:.1} ms, {} tracks buffered",
            self.p.rpm,
            self.p.track_bytes,
            self.p.track_bytes as f64 / (self.rev + self.p.head_switch) / 1e6,
            self.p.track_to_track * 1e3,
            self.p.full_stroke * 1e3,
            self.p.buffer_tracks
        )
    }
}
