//! Advice a caller gives about ranges of a file ([`Advice`]), kept as a
//! list of non-overlapping ranges.

/// How a range of a file will be read, for [`File::advise`](super::File::advise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advice {
    /// No particular pattern: the readahead policy decides (the default).
    Normal,
    /// Read forward: each read also asks for the next full window.
    Sequential,
    /// Read backward: each read also asks for the full window before it.
    Reverse,
    /// No readahead: read exactly what is asked.
    Random,
    /// Will be needed soon: prefetch it now.
    WillNeed,
}

/// Sets `advice` on `[offset, offset + len)` in a list of advised ranges:
/// the parts of earlier ranges outside it keep their advice (a narrower
/// advice once erased a wider one whole).
pub(super) fn set_advice(
    list: &mut Vec<(u64, u64, Advice)>,
    offset: u64,
    len: u64,
    advice: Advice,
) {
    let end = offset.saturating_add(len);
    let mut kept = Vec::with_capacity(list.len() + 2);
    for &(o, l, adv) in list.iter() {
        let e = o.saturating_add(l);
        if e <= offset || o >= end {
            kept.push((o, l, adv));
            continue;
        }
        if o < offset {
            kept.push((o, offset - o, adv));
        }
        if e > end {
            kept.push((end, e - end, adv));
        }
    }
    if advice != Advice::Normal && len > 0 {
        kept.push((offset, end - offset, advice));
    }
    *list = kept;
}

/// The advice in force at `offset`.
pub(super) fn advice_at(list: &[(u64, u64, Advice)], offset: u64) -> Advice {
    list.iter()
        .find(|&&(o, l, _)| offset >= o && offset < o.saturating_add(l))
        .map_or(Advice::Normal, |&(_, _, adv)| adv)
}
