// TEMPORARY STUB (replaced by the real guard)
#[derive(Debug)]
pub(crate) struct MappingFault;
impl std::fmt::Display for MappingFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SIGBUS")
    }
}
pub(crate) unsafe fn guarded_copy(dst: &mut [u8], src: *const u8) -> Result<(), MappingFault> {
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}
