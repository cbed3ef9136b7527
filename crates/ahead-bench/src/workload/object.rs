//! A workload on an object in a store (`ahead read s3://…`): only ahead
//! reads one.

use super::{measure_ahead, parts_for, AheadEngine, Engine, Measurement, Workload};

/// `run` for an object (`s3://…`, `http(s)://…`): only ahead reads one;
/// there is no kernel path, no device and nothing to drop from a cache.
pub(super) fn run_url(url: &str, engine: &Engine, w: &Workload) -> crate::Result<Measurement> {
    let Engine::Ahead {
        config, zero_copy, ..
    } = engine
    else {
        return Err(crate::Error::msg(format!(
            "{url}: an object is read only by ahead (--mode direct)"
        )));
    };
    let eng = AheadEngine::new(config.clone())?;
    let file = eng.open_url(url)?;
    let mut size = file.len();
    if w.span > 0 {
        size = size.min(w.span);
    }
    if size < w.bs {
        return Err(crate::Error::msg(format!(
            "{url}: {size} bytes, less than one request of {}",
            w.bs
        )));
    }
    let (parts, streams) = parts_for(w, size);
    measure_ahead(&eng, &file, parts, streams, w, *zero_copy)
}
