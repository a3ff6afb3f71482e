-- Example Lua agent: the task's result is its prompt in upper case.
-- Globals: prompt, system, input, task_id, attempt, agent (docs/tasks.md, Lua agents).
emit_progress("upper", "converting")
return { value = string.upper(prompt), ok = true }
