//! Device models: a rotating disk, a flash drive and a remote object store.
//!
//! Every model serves byte ranges and answers one question: when does an I/O
//! that starts now complete? The simulator keeps the queue; a device says how
//! many I/Os it serves at once ([`Device::concurrency`]) and, for the disk,
//! which queued I/O to serve next (the elevator).
//!
//! # The disk (`hdd`)
//!
//! The preset is the on-demand RFC's disk (docs/references.md), a 160 GB 7200
//! rpm SATA drive with an 8 MB buffer (the RFC: "160G/8M Hitachi SATA II 7200
//! RPM"), whose sequential read rate the RFC measured at about 62 MB/s. What
//! the model keeps of a real drive, because the RFC's numbers depend on it:
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
//!   speed (the RFC: reverse read 50 MB/s against 62 forward): by the time
//!   the reader asks for the part of the track below, it is in the buffer.
//! * **The buffer** holds [`HddParams::buffer_tracks`] recently read tracks
//!   (8 MB), least recently used out.
//! * **The elevator** (the kernel's, in front of the drive): queued requests
//!   are served in ascending order from the head's position, wrapping around
//!   (C-LOOK).
//!
//! Calibrated once against the RFC's sequential figure (track size from the
//! 62 MB/s media rate) and the Hitachi Deskstar 7K160's data sheet (seek
//! times); never tuned per workload.
//!
//! # Capped volumes (`cloud`, `small-cloud`, `fast`, `BPS,IOPS`)
//!
//! What `ahead bench --device` and a provisioned cloud volume enforce: a
//! fast device behind a bandwidth cap and an IOPS cap (a cgroup's
//! throttle). As the kernel's throttle does, the caps are applied in
//! windows of 100 ms: each window lets its share of I/Os and bytes through
//! at once, and an I/O beyond it waits for the next window ([`Capped`]);
//! then the I/O takes the device's own latency. The same profiles as
//! `ahead bench --device`, so a trace replayed on one predicts a real run
//! on the steady device. `BPS,IOPS[,LATENCY]` sets the caps (and the
//! device's latency per I/O, `55us` by default).
//!
//! # Object stores behind a network (`s3`)
//!
//! `ahead bench remote`'s shaper as a model: a first byte per request, a
//! bandwidth per connection and in all, a request-rate cap, the engine's
//! requests in flight ([`ObjectStore`]).
//!
//! # Flash (`ssd`) and a generic remote store (`net`)
//!
//! A fixed latency per I/O, a bandwidth shared by all I/Os in flight, and a
//! queue depth: `complete = max(start + latency, pipe_free) + bytes /
//! bandwidth`. The `net` preset is a remote object store: a round trip of
//! milliseconds, modest bandwidth, many concurrent requests.

use ahead::ra::DeviceCost;
use std::fmt;
use std::str::FromStr;

mod capped;
mod hdd;
mod object;
mod pipe;

pub use capped::{Capped, CappedParams};
pub use hdd::{Hdd, HddParams};
pub use object::{ObjectParams, ObjectStore};
pub use pipe::{Pipe, PipeParams};

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
    /// The on-demand RFC's 7200 rpm SATA disk.
    Hdd,
    /// A flash drive.
    Ssd,
    /// A remote object store.
    Net,
    /// A volume capped in bandwidth and IOPS.
    Capped(CappedParams),
    /// An object store behind a network of known latency and bandwidth
    /// (`s3`: `ahead bench remote`'s profile).
    Object(ObjectParams),
}

impl DeviceKind {
    /// Name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Hdd => "hdd",
            DeviceKind::Ssd => "ssd",
            DeviceKind::Net => "net",
            DeviceKind::Capped(p) => p.name,
            DeviceKind::Object(p) => p.name,
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
            DeviceKind::Object(p) => (p.total, p.first_byte),
        }
    }

    /// A fresh device of this kind with its preset parameters.
    pub fn build(self) -> Box<dyn Device> {
        match self {
            DeviceKind::Hdd => Box::new(Hdd::new(HddParams::default())),
            DeviceKind::Ssd => Box::new(Pipe::new(PipeParams::SSD)),
            DeviceKind::Net => Box::new(Pipe::new(PipeParams::NET)),
            DeviceKind::Capped(p) => Box::new(Capped::new(p)),
            DeviceKind::Object(p) => Box::new(ObjectStore::new(p)),
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
            "s3" => Ok(DeviceKind::Object(ObjectParams::S3)),
            other => {
                let bad = || {
                    ahead::ParseError::new(
                        "device",
                        s,
                        "hdd, ssd, net, s3, cloud, small-cloud, fast or BPS,IOPS[,LATENCY]",
                    )
                };
                let mut fields = other.split(',');
                let (Some(b), Some(i)) = (fields.next(), fields.next()) else {
                    return Err(bad());
                };
                let bps = ahead::units::parse_size(b.trim()).map_err(|_| bad())?;
                let iops: u64 = i.trim().parse().map_err(|_| bad())?;
                let latency = match fields.next() {
                    Some(l) => parse_latency(l.trim()).ok_or_else(bad)?,
                    None => CappedParams::FAST.latency,
                };
                if bps == 0 || iops == 0 || fields.next().is_some() {
                    return Err(bad());
                }
                Ok(DeviceKind::Capped(CappedParams {
                    name: "custom",
                    bps: bps as f64,
                    iops: iops as f64,
                    latency,
                    ..CappedParams::FAST
                }))
            }
        }
    }
}

/// A latency such as `55us`, `0.2ms` or `1e-4s` (seconds without a unit),
/// finite and not negative.
fn parse_latency(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else {
        (s.strip_suffix('s').unwrap_or(s), 1.0)
    };
    let v = num.trim().parse::<f64>().ok()? * scale;
    (v.is_finite() && v >= 0.0).then_some(v)
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
