-- Example Lua middleware, used as layer "lua:guard" (docs/tasks.md, Layers).
--
-- before(ctx): return nil to proceed, {meta = {...}} to add metadata to the
-- attempt, or {reject = "reason"} to refuse it.
-- after(ctx, result): return nil to keep the verdict, or {value = ..., ok = ...}
-- to append an override Final.

function before(ctx)
  if ctx.attempt ~= nil and ctx.attempt > 3 then
    return { reject = "guard: too many attempts" }
  end
  return { meta = { checked_by = "guard" } }
end

function after(ctx, result)
  if result ~= nil and result.value == "" then
    return { value = { original = result.value, note = "empty result" }, ok = false }
  end
  return nil
end
