// placeholder: kernel not written yet
