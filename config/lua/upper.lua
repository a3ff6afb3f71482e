-- Example Lua agent: the task's result is its prompt in upper case.
-- Globals: prompt, system, input, task_id, attempt, agent (SPEC §8.6).
emit_progress("upper", "converting")
return { value = string.upper(prompt), ok = true }
