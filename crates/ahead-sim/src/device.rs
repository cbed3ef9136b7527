//! Device models: a rotating disk, a flash drive and a remote object store.
//!
//! Every model serves byte ranges and answers one question: when does an I/O
//! that starts now complete? The simulator keeps the queue; a device says how
//! many I/Os it serves at once ([`Device::concurrency`]) and, for the disk,
//! which queued I/O to serve next (the elevator).
//!
//! # The disk (`hdd`)
//!
//! The preset is the seeds' disk, a 160 GB 7200 rpm SATA drive with an 8 MB
//! buffer (seed 000: "160G/8M Hitachi SATA II 7200 RPM"), whose sequential
//! read rate the seeds measured at about 62 MB/s. What the model keeps of a
//! real drive, because the seeds' numbers depend on it:
//!
//! * **Geometry.** Tracks of [`HddParams::track_bytes`] passing under the
//!   head once per revolution (8.33 ms at 7200 rpm), so the media rate is
//!   track size ÷ revolution time; heads per cylinder; seeks by cylinder
//!   distance, `track_to_track + (full_stroke - track_to_track) *
//!   sqrt(distance / cylinders)`, the usual square-root model of an actuator
//!   that accelerates then coasts; a head switch between tracks of one
//!   cylinder.
//! * **Rotation.** Angular position is derived from virtual time, so the
//!   rotational delay of every access follows from where the head is, not
//!   from a random draw.
//! * **Zero-latency full-track reads into the buffer.** Once on a track, the
//!   drive reads whatever passes under the head into its buffer, from the
//!   moment it arrives, and keeps reading the track (and the next one, its
//!   own read-ahead) while idle. A request completes when its last sector has
//!   passed. This is why a drive reads backwards at close to its forward
//!   speed (seed 000: reverse read 50 MB/s against 62 forward): by the time
//!   the reader asks for the part of the track below, it is in the buffer.
//! * **The buffer** holds [`HddParams::buffer_tracks`] recently read tracks
//!   (8 MB), least recently used out.
//! * **The elevator** (the kernel's, in front of the drive): queued requests
//!   are served in ascending order from the head's position, wrapping around
//!   (C-LOOK).
//!
//! Calibrated once against the seeds' sequential figure (track size from the
//! 62 MB/s media rate) and the Hitachi Deskstar 7K160's data sheet (seek
//! times); never tuned per workload.
//!
//! # Capped volumes (`cloud`, `small-cloud`, `fast`, `BPS,IOPS`)
//!
//! What `ahead bench --device` and a provisioned cloud volume enforce: a
//! fast device behind a bandwidth cap and an IOPS cap (cgroup `io.max`).
//! Both caps count totals: the n-th I/O, after B bytes in all, is let
//! through no sooner than n ÷ IOPS and B ÷ bandwidth after the start
//! ([`Capped`]), then takes the device's own latency. The same profiles as
//! `ahead bench --device`, so a trace replayed on one predicts a real run
//! on the steady device.
//!
//! # Flash (`ssd`) and object store (`net`)
//!
//! A fixed latency per I/O, a bandwidth shared by all I/Os in flight, and a
//! queue depth: `complete = max(start + latency, pipe_free) + bytes /
//! bandwidth`. The `net` preset is a remote object store: a round trip of
//! milliseconds, modest bandwidth, many concurrent requests.

use ahead::ra::DeviceCost;
use std::fmt;
use std::str::FromStr;

/// An I/O for a device: `len` bytes at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevIo {
    /// Byte offset on the device.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A device model.
pub trait Device {
    /// How many I/Os it serves at once.
    fn concurrency(&self) -> usize;
    /// Starts `io` at time `now` (seconds); returns its completion time.
    fn start(&mut self, now: f64, io: DevIo) -> f64;
    /// Where the head is, for devices served through an elevator: queued
    /// I/Os then start in ascending order from here, wrapping around
    /// (C-LOOK). `None`: first come, first served.
    fn elevator_head(&self) -> Option<u64> {
        None
    }
    /// Short description of the model and its parameters.
    fn describe(&self) -> String;
    /// What it charges, in pages of `page_size` (what a readahead policy
    /// weighs its windows against: [`ahead::ra::DeviceCost`]).
    fn cost(&self, page_size: u64) -> DeviceCost;
}

/// The device models.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DeviceKind {
    /// The seeds' 7200 rpm SATA disk.
    Hdd,
    /// A flash drive.
    Ssd,
    /// A remote object store.
    Net,
    /// A volume capped in bandwidth and IOPS.
    Capped(CappedParams),
}

impl DeviceKind {
    /// Name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Hdd => "hdd",
            DeviceKind::Ssd => "ssd",
            DeviceKind::Net => "net",
            DeviceKind::Capped(p) => p.name,
        }
    }

    /// The model's streaming bandwidth (bytes per second) and the time one
    /// random request takes (seconds), nominally: what a bound on a run's
    /// time is made of. The disk's request is an average seek and half a
    /// revolution (8 ms); a capped volume's, its IOPS cap's interval.
    pub fn nominal(self) -> (f64, f64) {
        match self {
            DeviceKind::Hdd => (62e6, 8e-3),
            DeviceKind::Ssd => (PipeParams::SSD.bandwidth, PipeParams::SSD.latency),
            DeviceKind::Net => (PipeParams::NET.bandwidth, PipeParams::NET.latency),
            DeviceKind::Capped(p) => (p.bps, 1.0 / p.iops),
        }
    }

    /// A fresh device of this kind with its preset parameters.
    pub fn build(self) -> Box<dyn Device> {
        match self {
            DeviceKind::Hdd => Box::new(Hdd::new(HddParams::default())),
            DeviceKind::Ssd => Box::new(Pipe::new(PipeParams::SSD)),
            DeviceKind::Net => Box::new(Pipe::new(PipeParams::NET)),
            DeviceKind::Capped(p) => Box::new(Capped::new(p)),
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DeviceKind {
    type Err = ahead::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hdd" => Ok(DeviceKind::Hdd),
            "ssd" => Ok(DeviceKind::Ssd),
            "net" => Ok(DeviceKind::Net),
            "cloud" => Ok(DeviceKind::Capped(CappedParams::CLOUD)),
            "small-cloud" => Ok(DeviceKind::Capped(CappedParams::SMALL_CLOUD)),
            "fast" => Ok(DeviceKind::Capped(CappedParams::FAST)),
            other => {
                let bad = || {
                    ahead::ParseError::new(
                        "device",
                        s,
                        "hdd, ssd, net, cloud, small-cloud, fast or BPS,IOPS",
                    )
                };
                let (b, i) = other.split_once(',').ok_or_else(bad)?;
                let bps = ahead::units::parse_size(b.trim()).map_err(|_| bad())?;
                let iops: u64 = i.trim().parse().map_err(|_| bad())?;
                if bps == 0 || iops == 0 {
                    return Err(bad());
                }
                Ok(DeviceKind::Capped(CappedParams {
                    name: "custom",
                    bps: bps as f64,
                    iops: iops as f64,
                    ..CappedParams::FAST
                }))
            }
        }
    }
}

/// A volume capped in bandwidth and IOPS over a fast device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CappedParams {
    /// Name of the profile.
    pub name: &'static str,
    /// Bandwidth cap, bytes per second.
    pub bps: f64,
    /// Cap on I/Os per second.
    pub iops: f64,
    /// The device's own latency per I/O once let through, seconds.
    pub latency: f64,
    /// The device's own bandwidth, bytes per second.
    pub device_bps: f64,
    /// I/Os the device serves at once.
    pub queue_depth: usize,
}

impl CappedParams {
    /// The device under the caps: this machine's virtio disk with the
    /// host holding the data (what the steady tool warms it to): about
    /// 2 GB/s streaming (docs/measuring.md: 2-2.7 GB/s host-warm), 64 requests
    /// at once (the virtio queue), and 75 µs for a 4 KiB read under the
    /// cap: sqlite3 reading a 188 MB table backwards, 4 KiB at a time
    /// (45,800 reads), took 3.54 s cold and 0.10 s warm on the `fast` cap
    /// (`corpus/predict.sh`), 75 µs a read; its IN-list query 100 µs a read.
    const DEVICE: CappedParams = CappedParams {
        name: "device",
        bps: f64::INFINITY,
        iops: f64::INFINITY,
        latency: 75e-6,
        device_bps: 2e9,
        queue_depth: 64,
    };
    /// `ahead bench --device cloud`: a provisioned cloud SSD volume, 200
    /// MiB/s and 5000 IOPS.
    pub const CLOUD: CappedParams = CappedParams {
        name: "cloud",
        bps: (200 << 20) as f64,
        iops: 5000.0,
        ..CappedParams::DEVICE
    };
    /// `small-cloud`: the smallest cloud volumes, 125 MiB/s and 3000 IOPS.
    pub const SMALL_CLOUD: CappedParams = CappedParams {
        name: "small-cloud",
        bps: (125 << 20) as f64,
        iops: 3000.0,
        ..CappedParams::DEVICE
    };
    /// `fast`: a fast volume, 400 MiB/s and 20000 IOPS.
    pub const FAST: CappedParams = CappedParams {
        name: "fast",
        bps: (400 << 20) as f64,
        iops: 20000.0,
        ..CappedParams::DEVICE
    };
}

/// The caps as totals (two virtual clocks, one per cap) in front of a
/// latency + bandwidth device.
#[derive(Clone, Debug)]
pub struct Capped {
    p: CappedParams,
    /// When the IOPS cap lets the next I/O through.
    io_free: f64,
    /// When the bandwidth cap lets the next byte through.
    byte_free: f64,
    /// When the device's own pipe is free.
    pipe_free: f64,
}

impl Capped {
    /// A device with these caps.
    pub fn new(p: CappedParams) -> Capped {
        Capped {
            p,
            io_free: 0.0,
            byte_free: 0.0,
            pipe_free: 0.0,
        }
    }
}

impl Device for Capped {
    fn concurrency(&self) -> usize {
        self.p.queue_depth
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let io_at = now.max(self.io_free);
        let byte_at = now.max(self.byte_free);
        self.io_free = io_at + 1.0 / self.p.iops;
        self.byte_free = byte_at + io.len as f64 / self.p.bps;
        let through = io_at.max(byte_at);
        let done =
            (through + self.p.latency).max(self.pipe_free) + io.len as f64 / self.p.device_bps;
        self.pipe_free = done;
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} MiB/s and {:.0} IOPS caps over a {:.0} µs, {:.1} GB/s device",
            self.p.name,
            self.p.bps / (1 << 20) as f64,
            self.p.iops,
            self.p.latency * 1e6,
            self.p.device_bps / 1e9
        )
    }

    /// * request: an I/O takes 1 ÷ IOPS of the IOPS cap, in which the
    ///   bandwidth cap passes bandwidth ÷ IOPS bytes (a cloud volume's
    ///   200 MiB/s ÷ 5000 is 41.9 KB, 10 pages of 4 KiB);
    /// * latency: the device's, or the IOPS cap's interval if longer;
    /// * parallelism: what the IOPS cap lets a reader keep in flight
    ///   (Little's law: IOPS × latency, 1.2 for `fast`), rounded up, plus
    ///   one: more only wait for the cap.
    fn cost(&self, page_size: u64) -> DeviceCost {
        let page = page_size as f64;
        DeviceCost {
            request_pages: (self.p.bps / self.p.iops / page) as u64,
            latency_pages: (self.p.latency.max(1.0 / self.p.iops) * self.p.bps / page) as u64,
            parallelism: (self.p.iops * self.p.latency).ceil() as u64 + 1,
        }
    }
}

/// Parameters of the disk model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HddParams {
    /// Bytes per track. Calibrated so that streaming, one track per
    /// revolution plus the head switch between tracks, runs at the seeds'
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
struct Stream {
    track: u64,
    since: f64,
    from: f64,
    stop: u64,
}

const EPS: f64 = 1e-9;

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
    fn piece(&mut self, t: f64, track: u64, a: f64, b: f64, req_last: u64) -> f64 {
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

/// Parameters of the latency + shared-bandwidth model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PipeParams {
    /// Name of the preset.
    pub name: &'static str,
    /// Latency of one I/O before its data flows, seconds.
    pub latency: f64,
    /// Bandwidth shared by all I/Os, bytes per second.
    pub bandwidth: f64,
    /// I/Os served at once.
    pub queue_depth: usize,
}

impl PipeParams {
    /// A SATA-class flash drive: 80 µs read latency, 500 MB/s, 32 commands
    /// (NCQ).
    pub const SSD: PipeParams = PipeParams {
        name: "ssd",
        latency: 80e-6,
        bandwidth: 500e6,
        queue_depth: 32,
    };
    /// A remote object store: 20 ms to first byte, 100 MB/s, 16 requests in
    /// flight.
    pub const NET: PipeParams = PipeParams {
        name: "net",
        latency: 20e-3,
        bandwidth: 100e6,
        queue_depth: 16,
    };
}

/// Latency + shared bandwidth + queue depth.
#[derive(Clone, Debug)]
pub struct Pipe {
    p: PipeParams,
    pipe_free: f64,
}

impl Pipe {
    /// A device with these parameters.
    pub fn new(p: PipeParams) -> Pipe {
        Pipe { p, pipe_free: 0.0 }
    }
}

impl Device for Pipe {
    fn concurrency(&self) -> usize {
        self.p.queue_depth
    }

    /// Latencies overlap across the queue: an I/O holds the device for its
    /// latency ÷ queue depth beyond its bytes (ssd: 2.5 µs, under a page;
    /// net: 1.25 ms, 30 pages); a reader waits the whole latency (ssd: 80
    /// µs, 9 pages); its queue depth.
    fn cost(&self, page_size: u64) -> DeviceCost {
        let pages = |t: f64| (t * self.p.bandwidth / page_size as f64) as u64;
        DeviceCost {
            request_pages: pages(self.p.latency / self.p.queue_depth as f64),
            latency_pages: pages(self.p.latency),
            parallelism: self.p.queue_depth as u64,
        }
    }

    fn start(&mut self, now: f64, io: DevIo) -> f64 {
        let ready = now + self.p.latency;
        let done = ready.max(self.pipe_free) + io.len as f64 / self.p.bandwidth;
        self.pipe_free = done;
        done
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:.0} µs latency, {:.0} MB/s, queue depth {}",
            self.p.name,
            self.p.latency * 1e6,
            self.p.bandwidth / 1e6,
            self.p.queue_depth
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(dev: &mut dyn Device, ios: impl Iterator<Item = DevIo>) -> f64 {
        let mut now = 0.0;
        let mut bytes = 0;
        for io in ios {
            now = dev.start(now, io);
            bytes += io.len;
        }
        bytes as f64 / now / 1e6
    }

    /// Sequential reads of `len` bytes, one after another, stream at the
    /// calibrated 62 MB/s whatever their size.
    #[test]
    fn hdd_sequential_reads_stream_near_62_mb_s() {
        for (len, count) in [(1u64 << 20, 200u64), (1 << 16, 4000)] {
            let mut d = Hdd::new(HddParams::default());
            let mb = rate(
                &mut d,
                (0..count).map(|i| DevIo {
                    offset: i * len,
                    len,
                }),
            );
            assert!((58.0..63.0).contains(&mb), "{len} B reads: {mb} MB/s");
        }
    }

    #[test]
    fn hdd_backward_reads_are_served_by_the_track_buffer() {
        let mut d = Hdd::new(HddParams::default());
        let top = 1u64 << 30;
        let back = rate(
            &mut d,
            (1..2000).map(|i| DevIo {
                offset: top - i * 65536,
                len: 65536,
            }),
        );
        let mut d = Hdd::new(HddParams::default());
        let random = rate(
            &mut d,
            (0..2000u64).map(|i| DevIo {
                offset: (i * 2_654_435_761 % 16384) * 65536,
                len: 65536,
            }),
        );
        assert!(
            back > 3.0 * random,
            "backward {back} MB/s vs random {random} MB/s"
        );
    }

    /// Regression: a request served from the buffer used to extend the
    /// drive's read-ahead from wherever the head was to that request's
    /// track, so the next access "streamed" across hundreds of tracks.
    #[test]
    fn buffer_hit_does_not_extend_read_ahead_across_the_disk() {
        let mut d = Hdd::new(HddParams::default());
        let mut now = 0.0;
        let mut worst: f64 = 0.0;
        for i in 0..2000u64 {
            let off = (i % 8) * (128 << 20) + (i / 8) * 65536;
            let start = now;
            now = d.start(
                now,
                DevIo {
                    offset: off,
                    len: 65536,
                },
            );
            worst = worst.max(now - start);
        }
        // A seek plus one revolution at most.
        assert!(worst < 0.025, "worst access {:.1} ms", worst * 1e3);
    }

    #[test]
    fn a_whole_track_read_from_its_first_sector_takes_a_revolution() {
        // At time 0 the head is exactly over sector 0 of track 0: reading
        // the whole track takes one revolution, not nothing.
        let p = HddParams::default();
        let mut d = Hdd::new(p);
        let done = d.piece(0.0, 0, 0.0, 1.0, 0);
        let rev = 60.0 / p.rpm;
        assert!((done - rev).abs() < 1e-12, "done {done}, revolution {rev}");
    }

    #[test]
    fn hdd_random_reads_pay_seek_and_rotation() {
        let mut d = Hdd::new(HddParams::default());
        let mb = rate(
            &mut d,
            (0..2000u64).map(|i| DevIo {
                offset: (i * 2_654_435_761 % 65536) * 65536,
                len: 65536,
            }),
        );
        // 64 KiB in a 4 GiB region: a short seek plus about half a turn.
        assert!((6.0..12.0).contains(&mb), "{mb} MB/s");
    }

    #[test]
    fn disk_has_an_elevator_and_flash_does_not() {
        assert_eq!(Hdd::new(HddParams::default()).elevator_head(), Some(0));
        assert_eq!(Pipe::new(PipeParams::SSD).elevator_head(), None);
    }

    #[test]
    fn pipe_shares_bandwidth() {
        let mut d = Pipe::new(PipeParams::SSD);
        let a = d.start(
            0.0,
            DevIo {
                offset: 0,
                len: 500_000,
            },
        );
        let b = d.start(
            0.0,
            DevIo {
                offset: 0,
                len: 500_000,
            },
        );
        assert!((a - 0.00108).abs() < 1e-6, "{a}");
        assert!((b - 0.00208).abs() < 1e-6, "{b}");
    }

    #[test]
    fn parses_kinds() {
        assert_eq!("HDD".parse::<DeviceKind>().unwrap(), DeviceKind::Hdd);
        assert!("floppy"
            .parse::<DeviceKind>()
            .unwrap_err()
            .to_string()
            .contains("floppy"));
    }
}
